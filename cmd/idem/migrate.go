package main

import (
	"context"
	"fmt"
	"io"
)

const migrateHelp = `Creates the record table (SQL stores: embedded, versioned migrations, safe
to run from several processes at once) or checks the server (Redis: it
refuses a maxmemory-policy that may evict records). idem proxy does the
same when it starts (and, with its store down then, when the store comes
up), so the proxy needs no separate migrate step; run it before a Go
service whose code does not call Store.Migrate, or to prepare a database
ahead of time with other credentials. Running it again changes nothing.
Without --store it uses IDEM_STORE, else sqlite:idem.db, like idem proxy.
`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("migrate", stderr)
	dsn := fs.String("store", "", storeFlagUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	h, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer closeStore(h, &err)
	fmt.Fprintf(stdout, "store %s is ready\n", h.DSN)
	return nil
}
