package sqlstore_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/sqlstore"
)

// TestConfigErrors: every option New rejects, and the arguments its
// methods reject before any I/O, are reported as a *idem.ConfigError of
// package sqlstore naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := configtest.NoDB(t)
	for field, cfg := range map[string]*sqlstore.Config{
		"Config.Dialect":   {},
		"Config.Table":     {Dialect: sqlstore.Postgres, Table: "a b"},
		"Config.MaxResult": {Dialect: sqlstore.Postgres, MaxResult: -1},
	} {
		_, err := sqlstore.New(db, cfg)
		configtest.Want(t, err, "sqlstore", field)
	}
	_, err := sqlstore.New(db, nil)
	configtest.Want(t, err, "sqlstore", "Config.Dialect")
	_, err = sqlstore.New(nil, &sqlstore.Config{Dialect: sqlstore.SQLite})
	configtest.Want(t, err, "sqlstore", "db")

	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	configtest.WantStoreArgs(t, s, "sqlstore")
	configtest.Want(t, s.CompleteTx(context.Background(), nil, idem.Owner{}, nil), "sqlstore", "tx")
}
