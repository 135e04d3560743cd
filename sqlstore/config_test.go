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
		"Config.Dialect":           {},
		"Config.Table":             {Dialect: sqlstore.Postgres, Table: "a b"},
		"Config.MaxResult":         {Dialect: sqlstore.Postgres, MaxResult: -1},
		"Config.ReplicationCheck":  {Dialect: sqlstore.Postgres, ReplicationCheck: -1},
		"Config.SynchronousCommit": {Dialect: sqlstore.Postgres, SynchronousCommit: "off"},
	} {
		_, err := sqlstore.New(db, cfg)
		configtest.Want(t, err, "sqlstore", field)
	}
	// A nil *Config is the defaults; the dialect then comes from the
	// driver, which NoDB's (none) does not tell.
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
	configtest.Want(t, sqlstore.PinSynchronousCommit(context.Background(), nil, "on"), "sqlstore", "tx")
	for _, level := range []string{"off", "local", "remote_write", "ON"} {
		configtest.Want(t, sqlstore.PinSynchronousCommit(context.Background(), db, level), "sqlstore", "level")
	}
	for _, cfg := range []*sqlstore.Config{
		{Dialect: sqlstore.Postgres, SynchronousCommit: "remote_write"},
		{Dialect: sqlstore.SQLite, SynchronousCommit: "on"},
		{Dialect: sqlstore.MySQL, SynchronousCommit: "on"},
	} {
		_, err := sqlstore.New(db, cfg)
		configtest.Want(t, err, "sqlstore", "Config.SynchronousCommit")
	}
	for _, level := range []string{"", "on", "remote_apply"} {
		if _, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres, SynchronousCommit: level}); err != nil {
			t.Errorf("SynchronousCommit %q: %v", level, err)
		}
	}
}

// SQLite has no replicas: Replication says so without I/O (the db here
// fails every call), and Begin never waits for a verdict.
func TestReplicationSQLite(t *testing.T) {
	t.Parallel()
	s, err := sqlstore.New(configtest.NoDB(t), &sqlstore.Config{Dialect: sqlstore.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Replication(context.Background())
	if err != nil || rep.Mode != idem.ReplicationSingle || rep.Replicas != 0 {
		t.Fatalf("Replication = %+v, %v; want a single server", rep, err)
	}
}
