package faultproxy_test

import (
	"database/sql"
	"testing"

	"github.com/idemkit/idem/idemtest/faultproxy"
)

// A test puts the proxy between a client and its server and breaks the
// connection on cue: here a PostgreSQL pool opened through it (Redirect
// rewrites the DSN's host and port to the proxy's), then every new and
// open connection refused until the test lets traffic pass again.
func ExampleNew() {
	outage := func(t *testing.T, dsn string) {
		p := faultproxy.New(t, "127.0.0.1:5432") // closed when the test ends
		db, err := sql.Open("pgx", faultproxy.Redirect(dsn, p.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()

		p.Set(faultproxy.Refuse)
		if err := db.PingContext(t.Context()); err == nil {
			t.Fatal("ping through a refusing proxy succeeded")
		}
		p.Set(faultproxy.Pass)
	}
	_ = outage // func TestOutage(t *testing.T) { outage(t, os.Getenv("DATABASE_URL")) }
}
