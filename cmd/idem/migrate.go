package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/outbox"
)

const migrateHelp = `Creates the record table (SQL stores: embedded, versioned migrations, safe
to run from several processes at once) or checks the server (Redis: it
refuses a maxmemory-policy that may evict records). idem proxy does the
same when it starts (and, with its store down then, when the store comes
up), so the proxy needs no separate migrate step; run it before a Go
service whose code does not call Store.Migrate, or to prepare a database
ahead of time with other credentials. Running it again changes nothing.
Without --store it uses IDEM_STORE, else sqlite:idem.db, like idem proxy.

--outbox also creates or upgrades the tables of a transactional outbox
(package outbox: TABLE, TABLE_keys, TABLE_lease and TABLE_migrations,
TABLE from --outbox-table, default idem_outbox) with the outbox's embedded
migrations, under the same locks as Outbox.Migrate: the step a service
whose code does not call Outbox.Migrate needs before its first Enqueue.
It needs a SQL store. 'idem outbox' looks at the parked messages.
`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("migrate", stderr)
	dsn := fs.String("store", "", storeFlagUsage)
	withOutbox := fs.Bool("outbox", false, "also create or upgrade the outbox tables (package outbox)")
	table := fs.String("outbox-table", "idem_outbox", "the outbox `TABLE` --outbox migrates (schema.table on PostgreSQL and MySQL)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	tableSet := false
	fs.Visit(func(f *flag.Flag) { tableSet = tableSet || f.Name == "outbox-table" })
	if tableSet && !*withOutbox {
		return usageErr("--outbox-table names the table of --outbox: give both")
	}
	if *withOutbox {
		d, err := parseStoreDSN(storeDSN(*dsn))
		if err != nil {
			return err
		}
		if d.Kind != storeurl.SQLite && d.Kind != storeurl.Postgres && d.Kind != storeurl.MySQL {
			return usageErr("--outbox needs a SQL store (sqlite:PATH, postgres://…, mysql://…), not %s", d)
		}
	}
	h, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	fmt.Fprintf(stdout, "store %s is ready\n", h.DSN)
	if !*withOutbox {
		return nil
	}
	ob, err := outbox.New(h.DB, &outbox.Config{Dialect: h.Dialect, Table: *table})
	if err != nil {
		return usageErr("--outbox-table: %v", err)
	}
	ms, err := ob.Migrations()
	if err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ob.Migrate(mctx); err != nil {
		return fmt.Errorf("store %s: %w", h.DSN, h.Wrap(err))
	}
	last := 0
	if len(ms) > 0 {
		last = ms[len(ms)-1].Version
	}
	fmt.Fprintf(stdout, "outbox %s is ready (schema version %d)\n", *table, last)
	return nil
}
