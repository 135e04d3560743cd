package main

import (
	"context"
	"errors"
	"io"
)

// runProxy is being written (issue 3); this placeholder is replaced with the
// sidecar.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("proxy: not built yet")
}
