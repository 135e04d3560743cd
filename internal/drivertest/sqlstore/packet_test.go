package sqlstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlstore"
)

// On MySQL/MariaDB the store learns max_allowed_packet and caps MaxResult
// by it: a result over the server's limit (16 MiB on the shared MariaDB)
// is ErrResultTooLarge, not "unavailable", so Do leaves a terminal record
// and a retry never runs the work again.
func TestMySQLResultOverMaxAllowedPacket(t *testing.T) {
	t.Parallel()
	b := backends[1]
	db, _ := b.open(t)
	s := newStore(t, b, db) // Migrate reads max_allowed_packet
	var packet int
	if err := db.QueryRowContext(ctxT(t), "SELECT @@max_allowed_packet").Scan(&packet); err != nil {
		t.Fatal(err)
	}
	if got := s.MaxResult(); got >= packet || got < packet/2 {
		t.Fatalf("MaxResult() = %d with max_allowed_packet %d, want just under it", got, packet)
	}
	big := make([]byte, packet+1)

	c, err := s.Begin(ctxT(t), idem.BeginRequest{Key: idem.MustKey("", "over-packet")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctxT(t), c.Owner, big); !errors.Is(err, idem.ErrResultTooLarge) || idem.IsUnavailable(err) {
		t.Fatalf("Complete over max_allowed_packet = %v, want ErrResultTooLarge", err)
	}
	if rec, err := s.Get(ctxT(t), c.Owner.Key); err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("record after a refused Complete = %+v, %v; want still in progress", rec, err)
	}

	// A Store that did not run Migrate learns the limit on its first large
	// Complete.
	s2, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: storeTable(s)})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	key := idem.MustKey("", "do-over-packet")
	fn := func(context.Context) ([]byte, error) { runs++; return big, nil }
	for i := range 2 {
		if _, err := idem.Do(ctxT(t), s2, key, nil, fn); !errors.Is(err, idem.ErrNotReplayable) {
			t.Fatalf("Do %d with a result over max_allowed_packet = %v, want ErrNotReplayable", i, err)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
}

// With interpolateParams the driver sends a result as escaped text, up to
// twice its size. A result under the cap whose text would exceed the packet
// is refused before it is sent: the server would answer such a statement
// by resetting the connection, an "unavailable" that leaves the claim in
// progress for every retry to run again.
func TestMySQLEscapedResultOverPacket(t *testing.T) {
	t.Parallel()
	b := backends[1]
	db, dsn := b.open(t)
	s0 := newStore(t, b, db)
	pool := openDSN(t, b.driver, dsn+sep(dsn)+"interpolateParams=true")
	s, err := sqlstore.New(pool, &sqlstore.Config{Dialect: b.dialect, Table: storeTable(s0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	c, err := s.Begin(ctxT(t), idem.BeginRequest{Key: idem.MustKey("", "escaped")})
	if err != nil {
		t.Fatal(err)
	}
	// Zero bytes are escaped as two characters: twice the size on the wire.
	res := make([]byte, s.MaxResult()*3/4)
	err = s.Complete(ctxT(t), c.Owner, res)
	if !errors.Is(err, idem.ErrResultTooLarge) {
		t.Fatalf("Complete whose statement exceeds max_allowed_packet = %v, want ErrResultTooLarge", err)
	}
}
