package main

import (
	"context"
	"fmt"
	"io"
)

const migrateHelp = `Creates the record table (SQL stores: embedded, versioned migrations, safe
to run from several processes at once) or checks the server (Redis: it
refuses a maxmemory-policy that may evict records). Run it once before
"idem proxy" or your service starts; running it again changes nothing.
`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("migrate", stderr)
	dsn := fs.String("store", "", "the store `DSN` (required); see 'idem help'")
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
