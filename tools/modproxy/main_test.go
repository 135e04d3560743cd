package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A module written by modproxy from a git commit is what the go command
// accepts from GOPROXY=file://…: go mod download verifies the zip and the
// go.mod against the go.sum lines modproxy printed, and the module's
// nested module (its own go.mod) is left out of the zip.
func TestServedModuleDownloads(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is required: ", err)
	}
	repo := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("m.go", "package m\n\nconst X = 1\n")
	write("sub/go.mod", "module example.com/m/sub\n\ngo 1.26\n")
	write("sub/sub.go", "package sub\n")
	runIn(t, repo, "git", "init", "-q")
	runIn(t, repo, "git", "add", "-A")
	runIn(t, repo, "git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "m")

	proxy := t.TempDir()
	var sums bytes.Buffer
	for _, v := range []string{"v0.2.0", "v0.1.0"} {
		if err := run([]string{"--repo", repo, "--out", proxy, "--version", v, "--rev", "HEAD", ".", "sub"}, &sums); err != nil {
			t.Fatal(err)
		}
	}
	list, err := os.ReadFile(filepath.Join(proxy, "example.com", "m", "@v", "list"))
	if err != nil {
		t.Fatal(err)
	}
	if string(list) != "v0.1.0\nv0.2.0\n" {
		t.Errorf("list = %q, want both versions in order", list)
	}

	// A module that requires both, resolved only from the proxy.
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/user\n\ngo 1.26\n\nrequire (\n\texample.com/m v0.2.0\n\texample.com/m/sub v0.2.0\n)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "go.sum"), sums.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "mod", "download", "-json", "example.com/m", "example.com/m/sub")
	cmd.Dir = user
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=file://"+filepath.ToSlash(proxy),
		"GONOSUMDB=example.com", "GOMODCACHE="+t.TempDir(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go mod download from the proxy: %v\n%s%s", err, out, stderr)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var m struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m.Error != "" {
			t.Fatalf("%s: %s", m.Path, m.Error)
		}
		_, subErr := os.Stat(filepath.Join(m.Dir, "sub"))
		switch m.Path {
		case "example.com/m":
			if subErr == nil {
				t.Errorf("the zip of example.com/m holds sub/, another module")
			}
		case "example.com/m/sub":
			if _, err := os.Stat(filepath.Join(m.Dir, "sub.go")); err != nil {
				t.Errorf("example.com/m/sub: %v", err)
			}
		}
	}
	// The go.sum lines were right: go mod download checked them and kept
	// them as they were.
	after, err := os.ReadFile(filepath.Join(user, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(after), sums.String()[:strings.Index(sums.String(), "\n")]) {
		t.Errorf("go.sum lost modproxy's lines:\n%s", after)
	}
}

func runIn(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
