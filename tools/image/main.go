// Command image writes an OCI image of the idem proxy, without a container
// daemon: an OCI image layout (a directory, or a tar of one with --tar)
// that any registry tool can push ("crane push", "skopeo copy
// oci:DIR docker://…", "oras") and any runtime can load.
//
// The image is built from scratch: one layer with the static idem binary
// at /idem, an /etc/passwd and /etc/group that name a non-root user
// (idem, 65532), the CA certificates of the build machine (for TLS to
// PostgreSQL, MySQL or Redis), and /data, owned by that user, as the
// working directory (the default store, sqlite:idem.db, lands there). The
// binary is the entrypoint, "proxy" the default command; the proxy listens
// on :8080 and serves /healthz, /readyz and /metrics on :9090 (set by
// IDEM_LISTEN and IDEM_ADMIN, which flags override).
//
// Usage (from the repository root):
//
//	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags "-s -w -X main.stampedVersion=v0.1.0" -o idem ./cmd/idem
//	go run ./tools/image --binary idem --version v0.1.0 --out idem-image
//
// The tool lives in a module of its own, so that the core module never
// requires an image library.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User and group the proxy runs as: not root, and the uid distroless images
// use for "nonroot".
const (
	uid = 65532
	gid = 65532
)

// Options say what to build.
type Options struct {
	Binary   string // a static idem binary for Platform
	Version  string // e.g. v0.1.0: the image's version label and tag
	Revision string // the VCS revision, for the revision label (optional)
	Arch     string // GOARCH of the binary: amd64, arm64
	CACerts  string // a PEM bundle to include; "" for none
	Created  time.Time
}

func main() {
	var o Options
	var out string
	flag.StringVar(&o.Binary, "binary", "", "the idem binary, built for linux with CGO_ENABLED=0 (required)")
	flag.StringVar(&o.Version, "version", "dev", "version for the image label and the layout's tag")
	flag.StringVar(&o.Revision, "revision", "", "VCS revision for the org.opencontainers.image.revision label")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "architecture of --binary (amd64, arm64)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", `CA bundle to put at /etc/ssl/certs/ca-certificates.crt ("" for none)`)
	flag.StringVar(&out, "out", "idem-image", "OCI image layout directory to write (must not exist)")
	epoch := flag.Int64("created", 0, "creation time, unix seconds (default: SOURCE_DATE_EPOCH, else 0: a reproducible image)")
	flag.Parse()
	o.Created = time.Unix(*epoch, 0).UTC()
	if *epoch == 0 {
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			var n int64
			if _, err := fmt.Sscan(s, &n); err != nil {
				fail(fmt.Errorf("SOURCE_DATE_EPOCH=%q: want unix seconds", s))
			}
			o.Created = time.Unix(n, 0).UTC()
		}
	}
	if o.Binary == "" {
		fail(errors.New("--binary is required"))
	}
	digest, err := Write(out, o)
	if err != nil {
		fail(err)
	}
	fmt.Printf("image: wrote %s (linux/%s, %s)\n", out, o.Arch, digest)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}

// Write builds the image and writes it as an OCI image layout at dir,
// tagged o.Version (the org.opencontainers.image.ref.name annotation). It
// returns the manifest's digest.
func Write(dir string, o Options) (v1.Hash, error) {
	img, err := Build(o)
	if err != nil {
		return v1.Hash{}, err
	}
	if _, err := os.Stat(dir); err == nil {
		return v1.Hash{}, fmt.Errorf("%s exists: remove it or choose another --out", dir)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.Version,
	}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.Arch})); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	if len(bin) < 4 || string(bin[:4]) != "\x7fELF" {
		return nil, fmt.Errorf("%s is not a Linux (ELF) binary", o.Binary)
	}
	var certs []byte
	if o.CACerts != "" {
		if certs, err = os.ReadFile(o.CACerts); err != nil {
			return nil, fmt.Errorf("CA certificates: %w", err)
		}
	}
	rootfs, err := rootFS(bin, certs, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(rootfs)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "idem tools/image: /idem, /etc/passwd, /etc/group, CA certificates, /data"},
	})
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: o.Created}
	labels := map[string]string{
		"org.opencontainers.image.title":       "idem proxy",
		"org.opencontainers.image.description": "An Idempotency-Key sidecar in front of any HTTP service",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.source":      "https://github.com/idemkit/idem",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	cf.Config = v1.Config{
		Entrypoint: []string{"/idem"},
		Cmd:        []string{"proxy"},
		User:       fmt.Sprintf("%d:%d", uid, gid),
		WorkingDir: "/data",
		Env: []string{
			"IDEM_LISTEN=:8080",
			"IDEM_ADMIN=:9090",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "9090/tcp": {}},
		Labels:       labels,
		StopSignal:   "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// rootFS is the image's one layer, as a tar with fixed times and owners, so
// that the same binary always gives the same layer digest.
func rootFS(bin, certs []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nidem:x:%d:%d:idem:/data:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nidem:x:%d:\n", gid)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("data", 0o755, uid) },
		func() error { return file("idem", 0o755, bin) },
	}
	if certs != nil {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file(filepath.ToSlash("etc/ssl/certs/ca-certificates.crt"), 0o644, certs) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
