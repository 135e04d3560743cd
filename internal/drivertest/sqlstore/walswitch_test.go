package sqlstore_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemkit/idem/sqlstore"
)

// The first connection to a new SQLite file switches it to WAL, and SQLite
// answers a connection that opens the file during the switch with
// SQLITE_BUSY at once (busy_timeout does not cover it). Migrate, which
// every instance may run at start-up, waits for the switch instead of
// failing: eight pools (eight processes' worth) race on each of several
// new files, which made one Migrate in a few rounds fail before it did.
func TestMigrateConcurrentlyNewSQLiteFiles(t *testing.T) {
	t.Parallel()
	const rounds, pools = 12, 8
	for round := range rounds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("idem-%d.db", round))
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, pools)
		for range pools {
			s, err := sqlstore.New(openDSN(t, "sqlite", sqlstore.SQLiteDSN(path)), &sqlstore.Config{Dialect: sqlstore.SQLite})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- s.Migrate(ctxT(t))
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: concurrent Migrate on a new file: %v", round, err)
			}
		}
	}
}
