// Package peek lets the driver tests in internal/drivertest read the few
// unexported values of core packages that those packages' own tests used to
// reach from inside (through export_test.go): statement texts, a store's
// table, a partial migration. The tests moved to the test-only drivertest
// module so that no SQL driver reaches the core module's go.mod, and an
// external test cannot see unexported fields.
//
// Each package sets its hooks in an init function; the arguments are typed
// any because this package cannot import the packages it serves (they
// import it). Nothing outside tests calls them.
package peek

import (
	"context"
	"database/sql"
)

// Hooks of package sqlstore; the store argument is a *sqlstore.Store, the
// dialect argument a sqlstore.Dialect.
var (
	SQLStoreClaimSQL    func(store any) string
	SQLStoreCompleteSQL func(store any) string
	SQLStoreTable       func(store any) string
	SQLStoreMigrateTo   func(ctx context.Context, store any, version int) error
	SQLStoreMigrations  func(dialect any) int
)

// InboxSweepSQL returns the sweep statement of an *inbox.Inbox.
var InboxSweepSQL func(inbox any) string

// FSMUpdateSQL builds the UPDATE of an *fsm.Machine for an fsm.Transition,
// an id and *fsm.Options, as Fire sends it.
var FSMUpdateSQL func(m, t, id, opts any) (string, []any, error)

// PglockLeaseConn returns the session (*sql.Conn) that holds a
// *pglock.Lease's advisory lock.
var PglockLeaseConn func(lease any) *sql.Conn

// Hooks of package redislock; l is a *redislock.Locker.
var (
	// RedislockKeys returns the Redis keys of a lock name: the lock's key
	// and its fence counter's.
	RedislockKeys func(l any, name string) (key, fenceKey string)
	// RedislockConfig returns the redislock.Config l runs with (defaults
	// applied).
	RedislockConfig func(l any) any
	// RedislockOnGoRedis builds a *redislock.Locker on a
	// redis.UniversalClient with a redislock.Config, without New's checks
	// (a client that ignores context deadlines, for fault tests).
	RedislockOnGoRedis func(rdb any, cfg any) any
)
