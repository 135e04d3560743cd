package tokentest_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
	"github.com/idemkit/idem/onetime/tokentest"
)

// A token store proves itself by running the suite from a test of its
// own, against its real server. This is the shape of sqltoken's on
// PostgreSQL: every store on a table of its own (newTable), and an
// unreachable one on a pool whose server does not answer.
func ExampleRun() {
	conformance := func(t *testing.T, db, deadDB *sql.DB, newTable func(t *testing.T) string) {
		open := func(t *testing.T, db *sql.DB) onetime.Store {
			s, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.Postgres, Table: newTable(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		tokentest.Run(t, tokentest.Harness{
			New: func(t *testing.T, _ time.Duration) onetime.Store {
				s := open(t, db)
				if err := s.(*sqltoken.Store).Migrate(t.Context()); err != nil {
					t.Fatal(err)
				}
				return s
			},
			Unreachable: func(t *testing.T) onetime.Store { return open(t, deadDB) },
		})
	}
	_ = conformance // func TestConformance(t *testing.T) { conformance(t, db, deadDB, freshTable) }
}
