package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Golden compares got with the committed golden file path (relative to the
// test's package directory, by convention under testdata/golden/) and
// returns the file's content.
//
// A golden file pins an encoding that outlives the process: stored records,
// digests, replayed answers. When got differs, the test fails: a release that
// writes another encoding would make records written by the previous one
// read differently, and a retry that spans a rolling upgrade could run twice
// (docs/stability.md). Such a change needs a new encoding version that still
// reads the old one, and a new golden file beside the old one; never
// regenerate a committed file.
//
// A missing file is written and the test fails, asking for it to be
// reviewed and committed; so a first run never passes by creating its own
// expectation.
func Golden(tb testing.TB, path string, got []byte) []byte {
	tb.Helper()
	want, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		tb.Fatalf("golden file %s did not exist: written; review it and commit it", path)
	}
	if err != nil {
		tb.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		tb.Errorf("%s: the encoding changed; records written by an earlier release would be read differently (docs/stability.md: add a new version, keep reading the old one, never regenerate a golden file)\n--- golden\n%s\n--- now\n%s", path, want, got)
	}
	return want
}
