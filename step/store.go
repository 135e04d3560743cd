package step

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
)

// Store is an idem.Store that also keeps recovery points: the results of
// the finished steps of the operation that holds a key. memstore,
// sqlstore, redisstore and tiered implement it; idemtest.RunSteps checks
// an implementation against its real server.
//
// An operation is the life of one record of the key: it begins when a
// Begin acquires the key afresh (nothing stored, or the record expired or
// was purged) and goes on through every takeover and release of that
// record, until the record expires. Its recovery points go with it: a
// retry after a crash, a lost lease or a release finds them; a new
// operation of the key, once the record expired or was purged, never
// does. Purge deletes them with their record.
type Store interface {
	idem.Store

	// SaveStep stores result as the recovery point of the step name of
	// owner's operation, in one atomic step with the check that owner
	// still holds the claim (in progress, its token and fence): otherwise
	// it returns idem.ErrLeaseLost and writes nothing, so an owner that
	// lost its lease cannot save a step after the new owner has. A step
	// already saved in the operation keeps its first result: a repeated
	// save (after a lost answer) succeeds and changes nothing.
	SaveStep(ctx context.Context, owner idem.Owner, name string, result []byte) error

	// Steps returns the recovery points of owner's operation by step
	// name, in at most one round trip: those saved under this claim and
	// under the earlier claims of the same operation, none of an earlier
	// operation of the key. When owner does not hold the key it returns
	// idem.ErrLeaseLost or no points (the next SaveStep fails with
	// idem.ErrLeaseLost in any case). In the same atomic step the store
	// ties the points to this claim's record, so that they last as long as
	// it does (a release gives the record a new expiry).
	Steps(ctx context.Context, owner idem.Owner) (map[string][]byte, error)
}

// MaxName is the longest step name a Store accepts, in bytes.
const MaxName = 200

// CheckName reports whether a Store accepts name as a step name: 1 to
// MaxName bytes. Stores call it first; the names Run reserves for its own
// recovery points (those that begin with '!') are valid here.
func CheckName(name string) error {
	if name == "" || len(name) > MaxName {
		return &idem.ConfigError{Package: "step", Field: "name", Reason: fmt.Sprintf("a step name is 1 to %d bytes, got %d", MaxName, len(name))}
	}
	return nil
}
