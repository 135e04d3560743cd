package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

const crashEnv = "IDEM_INBOX_CRASH_CHILD"

func TestMain(m *testing.M) {
	if point := os.Getenv(crashEnv); point != "" {
		crashChild(point)
		return
	}
	goleak.VerifyTestMain(m)
}

// crashChild is the consumer process the crash test kills: it processes
// message "m", says how far it got on stdout and then waits to be SIGKILLed,
// never acking.
func crashChild(point string) {
	d, _ := strconv.Atoi(os.Getenv("IDEM_INBOX_DIALECT"))
	dialect := inbox.Dialect(d)
	driver := map[inbox.Dialect]string{inbox.Postgres: "pgx", inbox.MySQL: "mysql", inbox.SQLite: "sqlite"}[dialect]
	db, err := sql.Open(driver, os.Getenv("IDEM_INBOX_DSN"))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	table := os.Getenv("IDEM_INBOX_TABLE")
	ib, err := inbox.New(db, &inbox.Config{Dialect: dialect, Table: table})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	out, err := ib.Process(ctx, "c", "m", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+`_effects (message_id) VALUES (`+dialect.Placeholder(1)+`)`, "m"); err != nil {
			return err
		}
		if point == "in-handler" {
			fmt.Println("IN-HANDLER")
			time.Sleep(time.Hour)
		}
		return nil
	})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("COMMITTED", out) // …and the ack never happens
	time.Sleep(time.Hour)
}

// TestCrash kills a consumer process with SIGKILL at two points and checks
// the redelivery: after the commit (before the ack) it is a Duplicate; inside
// the handler (before the commit) nothing was kept and it is Processed.
// Either way the effect happened exactly once.
func TestCrash(t *testing.T) {
	type crashDB struct {
		b   backend
		dsn func(t *testing.T) (*sql.DB, string)
	}
	dbs := []crashDB{
		{backends()[0], func(t *testing.T) (*sql.DB, string) { return testenv.PostgresDB(t) }},
		{backends()[2], func(t *testing.T) (*sql.DB, string) {
			dsn := sqliteDSN(testenv.SQLitePath(t))
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db, dsn
		}},
	}
	for _, c := range dbs {
		for _, point := range []string{"after-commit", "in-handler"} {
			t.Run(c.b.name+"/"+point, func(t *testing.T) {
				t.Parallel()
				db, dsn := c.dsn(t)
				b := c.b
				b.open = func(testing.TB) *sql.DB { return db }
				f := newFixture(t, b, nil)
				line := testenv.KillAtLine(t, "", time.Minute, []string{crashEnv + "=" + point,
					"IDEM_INBOX_DSN=" + dsn, "IDEM_INBOX_TABLE=" + f.table,
					"IDEM_INBOX_DIALECT=" + strconv.Itoa(int(b.dialect))}, "-test.run=^$")
				wantLine, wantOut := "COMMITTED processed", inbox.Duplicate
				if point == "in-handler" {
					wantLine, wantOut = "IN-HANDLER", inbox.Processed
				}
				if strings.TrimSpace(line) != wantLine {
					t.Fatalf("child said %q, want %q", line, wantLine)
				}
				// The broker redelivers to a new consumer.
				out, err := f.ib.Process(ctxT(t), "c", "m", f.effect("m"))
				if err != nil || out != wantOut {
					t.Fatalf("redelivery after SIGKILL %s: %v, %v; want %v", point, out, err, wantOut)
				}
				if n := f.effectsOf(t, "m"); n != 1 {
					t.Fatalf("%d effects, want exactly 1", n)
				}
			})
		}
	}
}
