package idemclient_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Idle keep-alive connections of the default transport are not
		// leaks; everything else (attempt timers, watchers of attempt
		// contexts, servers) must be gone.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
