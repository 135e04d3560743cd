package storeurl

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// roundTrip opens d, prepares it and runs a claim, a result and its replay
// through the store; it returns the Redis key of the record.
func roundTrip(t *testing.T, d DSN) string {
	t.Helper()
	h, err := Open(d)
	if err != nil {
		t.Fatalf("Open(%s): %v", d, err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.Prepare(ctx); err != nil {
		t.Fatalf("Prepare(%s): %v", d, err)
	}
	key := idem.MustKey("storeurl", testenv.Name("k"))
	c, err := h.Store.Begin(ctx, idem.BeginRequest{Key: key, Retention: time.Minute})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin through %s = %v, %v", d, c.Outcome, err)
	}
	if err := h.Store.Complete(ctx, c.Owner, []byte("done")); err != nil {
		t.Fatal(err)
	}
	if r, err := h.Store.Begin(ctx, idem.BeginRequest{Key: key}); err != nil || string(r.Result) != "done" {
		t.Fatalf("replay through %s = %+v, %v", d, r, err)
	}
	return h.Store.(*redisstore.Store).Key(key)
}

// admin is a go-redis client of a private server, as its administrator.
func admin(t *testing.T, addr string, db int, user, pass string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, Username: user, Password: pass, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisDSNsReachAStore: every redis:// form the command line accepts
// (go-redis's URL grammar, unchanged) reaches a working store on rueidis,
// with the DSN's database, credentials, client name and TLS.
func TestRedisDSNsReachAStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	root := admin(t, srv.Addr(), 0, "", "")
	if err := root.Do(ctx, "ACL", "SETUSER", "app", "on", ">AclS3cret", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dsn        string
		db         int
		user, pass string
	}{
		{dsn: "redis://" + srv.Addr()},
		{dsn: "redis://" + srv.Addr() + "/0"},
		{dsn: "redis://" + srv.Addr() + "/3", db: 3},
		{dsn: "redis://" + srv.Addr() + "?db=5", db: 5},
		{dsn: "redis://app:AclS3cret@" + srv.Addr() + "/2", db: 2, user: "app", pass: "AclS3cret"},
		{dsn: "redis://" + srv.Addr() + "/1?dial_timeout=1s&read_timeout=2s&write_timeout=2s&max_retries=-1&protocol=2", db: 1},
		{dsn: "redis://" + srv.Addr() + "/4?client_name=idem-dsn-test&read_timeout=-1&dial_timeout=-1", db: 4},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			d, err := Parse(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			k := roundTrip(t, d)
			if n, err := admin(t, srv.Addr(), tc.db, tc.user, tc.pass).Exists(ctx, k).Result(); err != nil || n != 1 {
				t.Errorf("record %s in db %d: %d, %v", k, tc.db, n, err)
			}
		})
	}

	// A password of the whole server (requirepass, last: the private
	// server keeps it), and the client's name.
	t.Run("requirepass", func(t *testing.T) {
		if err := root.ConfigSet(ctx, "requirepass", "ReqS3cret").Err(); err != nil {
			t.Fatal(err)
		}
		d, err := Parse("redis://:ReqS3cret@" + srv.Addr() + "/6?client_name=idem-dsn-test")
		if err != nil {
			t.Fatal(err)
		}
		h, err := Open(d)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := h.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		list, err := admin(t, srv.Addr(), 0, "", "ReqS3cret").ClientList(ctx).Result()
		if err != nil || !strings.Contains(list, "name=idem-dsn-test") {
			t.Errorf("CLIENT LIST has no connection named by the DSN (%v):\n%s", err, list)
		}
		bad, err := Parse("redis://:WrongS3cret@" + srv.Addr() + "/6")
		if err != nil {
			t.Fatal(err)
		}
		hb, err := Open(bad)
		if err == nil {
			err = hb.Prepare(ctx)
			hb.Close()
		}
		if err == nil || strings.Contains(err.Error(), "WrongS3cret") || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("a wrong password = %v; want WRONGPASS, without the password", err)
		}
		t.Logf("a wrong password: %v", err)
	})
}

// TestRedissDSN: rediss:// reaches a TLS-only server (skip_verify for its
// self-signed certificate), and the same server refuses verification
// without it.
func TestRedissDSN(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server binary", err)
	}
	dir := t.TempDir()
	writeSelfSigned(t, dir)
	port := testenv.FreePort(t)
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", filepath.Join(dir, "cert.pem"), "--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Fatalf("TLS redis-server did not come up: %v\n%s", err, log)
		}
		time.Sleep(25 * time.Millisecond)
	}
	d, err := Parse("rediss://" + addr + "/0?skip_verify=true")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, d)

	strict, err := Parse("rediss://" + addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(strict)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = h.Prepare(ctx)
		cancel()
		h.Close()
	}
	var uerr x509.UnknownAuthorityError
	if err == nil || !(errors.As(err, &uerr) || strings.Contains(err.Error(), "certificate")) {
		t.Errorf("rediss:// to a self-signed server without skip_verify = %v; want a certificate error", err)
	}
}

func writeSelfSigned(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "idem test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"cert.pem": {Type: "CERTIFICATE", Bytes: der}, "key.pem": {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisDownAtOpen: a Redis that is not there yet is no Open error (the
// proxy starts with its cache down); Prepare and the store report it as
// unavailable, without the password; once the server is up, the same
// handle works.
func TestRedisDownAtOpen(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	srv.Kill()
	d, err := Parse(fmt.Sprintf("redis://:DownS3cret@%s/0?dial_timeout=200ms", srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(d)
	if err != nil {
		t.Fatalf("Open with the server down: %v", err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = h.Prepare(ctx)
	if !idem.IsUnavailable(err) || strings.Contains(err.Error(), "DownS3cret") {
		t.Fatalf("Prepare with the server down = %v; want unavailable, without the password", err)
	}
	if _, err := h.Store.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("s", "k")}); !idem.IsUnavailable(err) {
		t.Fatalf("Begin with the server down = %v; want unavailable", err)
	}
	srv.Start()
	if err := admin(t, srv.Addr(), 0, "", "").ConfigSet(ctx, "requirepass", "DownS3cret").Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Prepare(ctx); err != nil {
		t.Fatalf("Prepare once the server is up: %v", err)
	}
	if c, err := h.Store.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("s", "k")}); err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin once the server is up = %v, %v", c.Outcome, err)
	}
}
