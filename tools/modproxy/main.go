// Command modproxy writes Go modules into a module proxy directory, the
// layout that GOPROXY=file:///DIR serves: for each module,
// DIR/<escaped path>/@v/list and, for the version, .info, .mod and .zip.
// The zips are made by golang.org/x/mod/zip, the code the go command uses
// itself, so a module served from DIR is byte for byte what a public proxy
// would serve for the same tag.
//
// scripts/release uses it twice: while it makes the release commit, to
// serve each module it has rewritten to the modules that require it (so
// that their go mod tidy records its checksum), and scripts/release-check
// uses it to serve the tagged commit to a scratch module that installs
// cmd/idem@VERSION from it.
//
// Usage (from the repository root):
//
//	modproxy --out DIR --version vX.Y.Z [--rev REV] MODDIR...
//
// Each MODDIR is a module's directory relative to the repository root.
// With --rev the module is read from the git commit or tag REV (as the go
// command reads a tag); without it, from the work tree. For each module it
// prints the two go.sum lines of the version it wrote (the zip's and the
// go.mod's hash).
//
// The tool lives in a module of its own, so that no released module
// requires golang.org/x/mod.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	out := fs.String("out", "", "the proxy directory to write (created if absent)")
	version := fs.String("version", "", "the version to write, such as v0.1.0")
	rev := fs.String("rev", "", "read the modules from this git commit or tag instead of the work tree")
	repo := fs.String("repo", ".", "the repository root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *version == "" || fs.NArg() == 0 {
		return errors.New("usage: modproxy --out DIR --version vX.Y.Z [--rev REV] [--repo ROOT] MODDIR …")
	}
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version {
		return fmt.Errorf("version %q: want a canonical semantic version such as v0.1.0", *version)
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	stamp := time.Now().UTC()
	if *rev != "" {
		t, err := git(root, "log", "-1", "--format=%cI", *rev)
		if err != nil {
			return err
		}
		if stamp, err = time.Parse(time.RFC3339, strings.TrimSpace(string(t))); err != nil {
			return fmt.Errorf("commit time of %s: %w", *rev, err)
		}
		stamp = stamp.UTC()
	}
	for _, dir := range fs.Args() {
		dir = filepath.ToSlash(filepath.Clean(dir))
		sums, err := write(root, dir, *rev, *out, *version, stamp)
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		fmt.Fprint(stdout, sums)
	}
	return nil
}

// write puts the module in directory dir (relative to root) into the proxy
// directory out as version v and returns its go.sum lines.
func write(root, dir, rev, out, v string, stamp time.Time) (string, error) {
	var gomod []byte
	var err error
	if rev != "" {
		gomod, err = git(root, "show", rev+":"+path(dir, "go.mod"))
	} else {
		gomod, err = os.ReadFile(filepath.Join(root, dir, "go.mod"))
	}
	if err != nil {
		return "", err
	}
	f, err := modfile.ParseLax("go.mod", gomod, nil)
	if err != nil {
		return "", err
	}
	if f.Module == nil {
		return "", errors.New("go.mod has no module line")
	}
	mv := module.Version{Path: f.Module.Mod.Path, Version: v}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return "", err
	}
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return "", err
	}
	escVersion, err := module.EscapeVersion(v)
	if err != nil {
		return "", err
	}
	at := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(at, escVersion)

	var z bytes.Buffer
	if rev != "" {
		subdir := dir
		if subdir == "." {
			subdir = ""
		}
		err = zip.CreateFromVCS(&z, mv, root, rev, subdir)
	} else {
		err = zip.CreateFromDir(&z, mv, filepath.Join(root, dir))
	}
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".zip", z.Bytes(), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, stamp})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return "", err
	}
	if err := addToList(filepath.Join(at, "list"), v); err != nil {
		return "", err
	}

	zipSum, err := dirhash.HashZip(base+".zip", dirhash.Hash1)
	if err != nil {
		return "", err
	}
	modSum, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gomod)), nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", mv.Path, v, zipSum, mv.Path, v, modSum), nil
}

// addToList adds v to the proxy's list file of a module, one version a line.
func addToList(name, v string) error {
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, v) {
		versions = append(versions, v)
	}
	semver.Sort(versions)
	return os.WriteFile(name, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

func path(dir, file string) string {
	if dir == "." {
		return file
	}
	return dir + "/" + file
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
