package sqlstore_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// TestMySQLReplicationSingle: the shared MariaDB has no replica attached
// and no semi-synchronous replication, so the store reports a single
// server and grants claims.
func TestMySQLReplicationSingle(t *testing.T) {
	t.Parallel()
	db, _ := testenv.MySQLDB(t)
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.MySQL, Table: testenv.Name("idem")})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Replication(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shared MariaDB: %v", rep)
	if rep.Mode != idem.ReplicationSingle || rep.Replicas != 0 || rep.Waits != 0 {
		t.Fatalf("Replication() = %+v, want a single server", rep)
	}
}

// checkRefused fails t unless err is the store's refusal to grant a claim
// on an asynchronously replicated server.
func checkRefused(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) {
		t.Fatalf("Begin error = %v, want ErrAsyncReplication and unavailable", err)
	}
}
