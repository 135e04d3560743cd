package sqltoken_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// TestConfigErrors: every option New rejects, and Insert's ttl, are
// reported as a *idem.ConfigError of package sqltoken naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := configtest.NoDB(t)
	for field, cfg := range map[string]*sqltoken.Config{
		"Config.Dialect": {},
		"Config.Table":   {Dialect: sqltoken.Postgres, Table: "tokens;"},
	} {
		_, err := sqltoken.New(db, cfg)
		configtest.Want(t, err, "sqltoken", field)
	}
	_, err := sqltoken.New(db, &sqltoken.Config{Dialect: 42})
	configtest.Want(t, err, "sqltoken", "Config.Dialect")
	_, err = sqltoken.New(nil, &sqltoken.Config{Dialect: sqltoken.SQLite})
	configtest.Want(t, err, "sqltoken", "db")
	s, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	configtest.Want(t, s.Insert(context.Background(), onetime.Digest{}, onetime.Digest{}, 0), "sqltoken", "ttl")

	// onetime.New, over this store.
	_, err = onetime.New(nil, nil)
	configtest.Want(t, err, "onetime", "store")
	_, err = onetime.New(s, &onetime.Config{TTL: -1})
	configtest.Want(t, err, "onetime", "Config.TTL")
}
