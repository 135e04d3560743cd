package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// idemBinary returns a static idem binary for linux/GOARCH stamped with
// version: $IDEM_IMAGE_BINARY (CI passes the release build's), or one
// built from the repository.
func idemBinary(t *testing.T, version string) string {
	if p := os.Getenv("IDEM_IMAGE_BINARY"); p != "" {
		return p
	}
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary runs on linux only") // never taken in CI, which runs on linux
	}
	out := filepath.Join(t.TempDir(), "idem")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.stampedVersion="+version, "-o", out, "./cmd/idem")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/idem: %v\n%s", err, b)
	}
	return out
}

// TestImage writes the image, reads it back from the OCI layout on disk,
// checks its manifest and config, and runs the binary it contains.
func TestImage(t *testing.T) {
	version := "v0.0.0-imagetest"
	if v := os.Getenv("IDEM_IMAGE_VERSION"); v != "" {
		version = v
	}
	bin := idemBinary(t, version)
	dir := filepath.Join(t.TempDir(), "oci")
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := Write(dir, Options{Binary: bin, Version: version, Revision: "0123abcd", Arch: runtime.GOARCH,
		CACerts: "/etc/ssl/certs/ca-certificates.crt", Created: created}); err != nil {
		t.Fatal(err)
	}

	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 || desc.Annotations["org.opencontainers.image.ref.name"] != version ||
		desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Fatalf("index entry: %+v", desc)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if strings.Join(c.Entrypoint, " ") != "/idem" || strings.Join(c.Cmd, " ") != "proxy" {
		t.Errorf("entrypoint %q cmd %q, want [/idem] [proxy]", c.Entrypoint, c.Cmd)
	}
	if c.User == "" || c.User == "0" || strings.HasPrefix(c.User, "0:") || c.User == "root" {
		t.Errorf("user %q: the image must not run as root", c.User)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/idemkit/idem",
		"org.opencontainers.image.revision": "0123abcd",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(strings.Join(c.Env, " "), "IDEM_ADMIN=:9090") {
		t.Errorf("env %q: no admin listener for the probes", c.Env)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Time.Equal(created) {
		t.Errorf("config platform %s/%s created %v", cf.OS, cf.Architecture, cf.Created)
	}

	// The filesystem: the binary, a passwd line for the image's user, and
	// /data owned by it.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	extracted := filepath.Join(t.TempDir(), "idem")
	var passwd string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
		switch h.Name {
		case "idem":
			f, err := os.OpenFile(extracted, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		case "etc/passwd":
			b, _ := io.ReadAll(tr)
			passwd = string(b)
		}
	}
	uidStr := strings.SplitN(c.User, ":", 2)[0]
	if !strings.Contains(passwd, ":x:"+uidStr+":") {
		t.Errorf("/etc/passwd has no line for the image's user %s:\n%s", uidStr, passwd)
	}
	if h := files["data/"]; h == nil || h.Uid != uid {
		t.Errorf("/data: %+v, want a directory owned by %d (the working directory, where sqlite:idem.db goes)", h, uid)
	}
	if h := files["idem"]; h == nil || h.Mode&0o111 == 0 {
		t.Fatalf("/idem: %+v, want an executable", h)
	}
	if _, ok := files["etc/ssl/certs/ca-certificates.crt"]; !ok {
		t.Error("no CA certificates")
	}
	if runtime.GOOS != "linux" {
		return
	}
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("idem version from the image: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "idem "+version+" ") {
		t.Fatalf("idem version from the image printed %q, want the stamped version %s", out, version)
	}
	t.Logf("%s", out)
}

// TestImageReproducible: the same binary and options give the same
// manifest digest.
func TestImageReproducible(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "idem")
	if err := os.WriteFile(bin, []byte("\x7fELF not really a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Binary: bin, Version: "v1.2.3", Arch: "arm64", Created: time.Unix(1, 0).UTC()}
	a, err := Write(filepath.Join(t.TempDir(), "a"), o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Write(filepath.Join(t.TempDir(), "b"), o)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two builds of one input: %s and %s", a, b)
	}
	if _, err := Build(Options{Binary: "/etc/passwd", Arch: "amd64"}); err == nil {
		t.Fatal("Build accepted a file that is not an ELF binary")
	}
}
