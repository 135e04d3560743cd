package testenv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// A race test run given a prebuilt race binary uses it and builds nothing
// (here the "cmd/idem" directory does not exist, so a build would fail);
// a missing file is a clear error, not a silent build.
func TestBuildIdemUsesThePrebuiltRaceBinary(t *testing.T) {
	if !testenv.RaceEnabled {
		t.Skip("only a race-built test binary takes $" + testenv.RaceBinaryEnv + " (CI runs the tests with -race)")
	}
	bin := filepath.Join(t.TempDir(), "idem")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(testenv.RaceBinaryEnv, bin)
	got, cleanup, err := testenv.BuildIdem(filepath.Join(t.TempDir(), "no-such-cmd"), true)
	if err != nil {
		t.Fatalf("BuildIdem: %v", err)
	}
	cleanup()
	if got != bin {
		t.Errorf("BuildIdem = %s, want the prebuilt %s", got, bin)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Errorf("cleanup removed the prebuilt binary: %v", err)
	}

	t.Setenv(testenv.RaceBinaryEnv, bin+".missing")
	if _, _, err := testenv.BuildIdem(".", true); err == nil || !strings.Contains(err.Error(), testenv.RaceBinaryEnv) {
		t.Errorf("BuildIdem with a missing prebuilt binary: %v, want an error naming $%s", err, testenv.RaceBinaryEnv)
	}
}
