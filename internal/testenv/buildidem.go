package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// RaceBinaryEnv names the environment variable that gives BuildIdem a
// prebuilt race binary of cmd/idem.
const RaceBinaryEnv = "IDEM_TEST_RACE_BINARY"

// BuildIdem builds the idem binary from cmdDir (the path of cmd/idem relative
// to the calling test's package directory) into a new temporary directory.
// It returns the binary's path and a function that removes the directory.
// TestMain calls it before m.Run, and its build errors go to stderr.
//
// With race true the binary is built with -race when this test binary was.
// The packages idem needs were then compiled for the same `go test -race` run
// and come from the build cache. A plain build compiles every dependency a
// second time, and concurrent plain builds each compile them again: on 2 cores
// at load 7 one took about 9 minutes, and go test's kill timer counts that
// time. A race-built child also reports its own data races: it exits with
// status 66, and the test that ran it fails. Pass false where a test measures
// the binary itself (its memory, its CPU): the race detector multiplies both.
//
// With race true, in a race-built test binary, and $IDEM_TEST_RACE_BINARY
// set, BuildIdem builds nothing and returns that file: .ci/run builds the
// race binary once, before the tests, because go test's kill timer (the
// -timeout plus a minute) counts a TestMain's build, and on a busy machine
// the builds of the three packages that run the binary, all at once, took
// longer than the timer (bench/client was killed at 11 minutes). The file
// must be a race build of this checkout's cmd/idem
// (go build -race -o FILE ./cmd/idem).
func BuildIdem(cmdDir string, race bool) (bin string, cleanup func(), err error) {
	if p := os.Getenv(RaceBinaryEnv); p != "" && race && raceEnabled {
		fi, err := os.Stat(p)
		if err != nil {
			return "", nil, fmt.Errorf("$%s: %w", RaceBinaryEnv, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", nil, fmt.Errorf("$%s: %s is not an executable file", RaceBinaryEnv, p)
		}
		return p, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "idem-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "idem")
	args := []string{"build", "-o", bin}
	if race && raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Dir = cmdDir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building the idem binary in %s: %w", cmdDir, err)
	}
	return bin, cleanup, nil
}

// RaceEnabled reports whether the test binary was built with -race.
const RaceEnabled = raceEnabled
