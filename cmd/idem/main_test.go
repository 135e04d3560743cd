package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/httpidem"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMigrateKeysGetPurgeOnSQLite(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if code, out, errs := runCLI(t, "migrate", "--store", dsn); code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("migrate: code %d, out %q, err %q", code, out, errs)
	}
	// Migrating again is a no-op.
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatalf("second migrate: %d %s", code, errs)
	}

	// Put one completed and one expired record into the store.
	d, err := storeurl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	h, err := storeurl.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	live := idem.MustKey("tenant-1", "order-1")
	c, err := h.Store.Begin(ctx, idem.BeginRequest{Key: live})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(ctx, c.Owner, []byte("receipt-1")); err != nil {
		t.Fatal(err)
	}
	old := idem.MustKey("tenant-1", "order-0")
	if _, err := h.Store.Begin(ctx, idem.BeginRequest{Key: old, Lease: 5 * time.Millisecond, Retention: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)

	code, out, errs := runCLI(t, "keys", "get", "--store", dsn, "--scope", "tenant-1", "--result", "order-1")
	if code != 0 {
		t.Fatalf("keys get: %d %s", code, errs)
	}
	for _, want := range []string{"state:       completed", live.Digest().String(), "result:      9 bytes", "receipt-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys get output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "--scope", "tenant-2", "order-1"); code != 1 || !strings.Contains(errs, "no record") {
		t.Errorf("keys get in another scope: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "bad key"); code != 1 || !strings.Contains(errs, "invalid key") || !strings.HasPrefix(errs, "idem keys get: ") {
		t.Errorf("keys get with a bad key: %d %q", code, errs)
	}
	if code, out, errs := runCLI(t, "keys", "purge", "--store", dsn, "--before", "1h"); code != 0 || out != "purged 0 expired records\n" {
		t.Errorf("purge --before 1h: %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, "keys", "purge", "--store", dsn); code != 0 || out != "purged 1 expired records\n" {
		t.Errorf("purge: %d %q %q", code, out, errs)
	}
	if code, _, _ := runCLI(t, "keys", "get", "--store", dsn, "--scope", "tenant-1", "order-1"); code != 0 {
		t.Errorf("purge deleted a live record")
	}
}

func TestBadInputIsOneLineWithoutPassword(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		has  string
	}{
		{[]string{"migrate", "--store", "oracle://u:hunter22@h/db"}, 1, "unknown scheme"},
		{[]string{"migrate", "--store", "mysql://root:hunter22@127.0.0.1:1/test"}, 1, "mysql://root:xxxxx@127.0.0.1:1/test"},
		{[]string{"migrate", "--store", "postgres://u:hunter22@127.0.0.1:1/test?connect_timeout=2"}, 1, "postgres://u:xxxxx@127.0.0.1:1/test"},
		{[]string{"migrate", "--store", "redis://:hunter22@127.0.0.1:1/0"}, 1, "redis://:xxxxx@127.0.0.1:1/0"},
		{[]string{"keys"}, 2, "subcommand is required"},
		{[]string{"keys", "frob"}, 2, "unknown subcommand"},
		{[]string{"keys", "purge", "--store", "memory:", "--before", "-1h"}, 2, "must not be negative"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errs := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if !strings.Contains(errs, tt.has) {
				t.Errorf("stderr %q lacks %q", errs, tt.has)
			}
			if strings.Contains(errs, "hunter22") {
				t.Errorf("stderr leaks the password: %q", errs)
			}
		})
	}
}

// TestStoreDefault: migrate and keys use the store idem proxy uses: --store,
// else IDEM_STORE, else sqlite:idem.db.
func TestStoreDefault(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "IDEM_STORE" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct{ flag, env, want string }{
		{"", "", "sqlite:idem.db"},
		{"", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"memory:", "redis://127.0.0.1:6379/0", "memory:"},
	} {
		if got := storeDSNEnv(tc.flag, env(tc.env)); got != tc.want {
			t.Errorf("--store %q, IDEM_STORE %q: %q, want %q", tc.flag, tc.env, got, tc.want)
		}
	}
	if o, err := parseProxyFlagsEnv([]string{"--upstream", "http://x:1"}, func(string) (string, bool) { return "", false }, io.Discard); err != nil || o.store != defaultStore {
		t.Errorf("the proxy's default store %q, %v; migrate and keys use %q", o.store, err, defaultStore)
	}
}

// The package doc lists every command that runs (a subcommand may share a
// line with its siblings: "idem outbox list|show|…"), so that it cannot
// fall behind the table again.
func TestDocListsEveryCommand(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commandTable() {
		if c.Run == nil {
			continue
		}
		words := strings.Fields(c.Name)
		pat := `(?m)^//\tidem ` + regexp.QuoteMeta(words[0])
		if len(words) > 1 {
			pat += ` +(\S*\|)?` + regexp.QuoteMeta(words[1]) + `(\||\s|$)`
		} else {
			pat += `(\s|$)`
		}
		if !regexp.MustCompile(pat).Match(doc) {
			t.Errorf("doc.go does not list idem %s", c.Name)
		}
	}
}

// The CLI's output is plain text: no source file of the command writes a
// terminal escape (colour, cursor moves), so a pipe, a log collector and a
// NO_COLOR terminal all get the same bytes (doc.go promises it).
func TestNoTerminalEscapes(t *testing.T) {
	t.Parallel()
	esc := regexp.MustCompile(`\\x1[bB]|\\033|\\u001[bB]|\\U0000001[bB]|\x1b`)
	n := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if loc := esc.FindIndex(src); loc != nil {
			t.Errorf("%s:%d writes a terminal escape", path, 1+bytes.Count(src[:loc[0]], []byte("\n")))
		}
		return nil
	})
	if err != nil || n < 10 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}

// Every command of the table answers "idem help NAME" and "idem NAME
// --help" with the same text on stdout, exit 0: its usage line (with its
// positional arguments) and, for commands with flags, each flag.
func TestHelpForEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commandTable() {
		t.Run(c.Name, func(t *testing.T) {
			words := strings.Fields(c.Name)
			code, viaHelp, errs := runCLI(t, append([]string{"help"}, words...)...)
			if code != 0 || errs != "" {
				t.Fatalf("idem help %s: exit %d, stderr %q", c.Name, code, errs)
			}
			if c.Name != "help" { // "idem help --help" is the list of commands
				code, viaFlag, errs := runCLI(t, append(words, "--help")...)
				if code != 0 || errs != "" {
					t.Fatalf("idem %s --help: exit %d, stderr %q", c.Name, code, errs)
				}
				if viaFlag != viaHelp {
					t.Errorf("idem %s --help differs from idem help %s:\n%s\n---\n%s", c.Name, c.Name, viaFlag, viaHelp)
				}
			}
			usage := "Usage: idem " + c.Name + " " + c.Args + "\n"
			if c.Help == "" && c.Run != nil { // the command prints its own text (proxy, demo, check)
				usage = "Usage: idem " + c.Name + " "
			}
			if !strings.HasPrefix(viaHelp, usage) {
				t.Errorf("help does not start with the usage line:\n%s", viaHelp)
			}
			if c.Run == nil {
				for _, sub := range subcommands(c.Name) {
					if !strings.Contains(viaHelp, c.Name+" "+sub) {
						t.Errorf("group help does not list %q:\n%s", sub, viaHelp)
					}
				}
				return
			}
			for _, want := range map[string][]string{
				"keys get":       {"--store DSN", "--scope SCOPE", "--header 'NAME: VALUE'", "--scope-header NAME", "--result", "KEY"},
				"keys list":      {"--store DSN", "--state STATE", "--limit N", "started"},
				"keys purge":     {"--store DSN", "--before DURATION", "--batch N"},
				"migrate":        {"--store DSN", "--outbox", "--outbox-table TABLE"},
				"outbox list":    {"--store DSN", "--table TABLE", "--limit N", "--json"},
				"outbox show":    {"--store DSN", "--table TABLE", "--json", "ID"},
				"outbox requeue": {"--store DSN", "--table TABLE", "--json", "ID..."},
				"outbox discard": {"--store DSN", "--table TABLE", "--json", "ID..."},
				"proxy":          {"-upstream"},
			}[c.Name] {
				if !strings.Contains(viaHelp, want) {
					t.Errorf("help lacks %q:\n%s", want, viaHelp)
				}
			}
		})
	}
}

func TestUsageListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "help")
	if code != 0 {
		t.Fatalf("idem help: exit %d", code)
	}
	for _, c := range commandTable() {
		if !strings.Contains(c.Name, " ") && !strings.Contains(out, "  "+c.Name+" ") {
			t.Errorf("idem help does not list %q:\n%s", c.Name, out)
		}
	}
	if code, _, errs := runCLI(t); code != 2 || !strings.Contains(errs, "Commands:") {
		t.Errorf("idem without a command: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "help", "frob"); code != 2 || !strings.Contains(errs, `unknown command "frob"`) {
		t.Errorf("idem help frob: exit %d, stderr %q", code, errs)
	}
}

// A bad flag prints the flag package's error and one line pointing at
// --help, on stderr, once; not the whole help text.
func TestFlagErrorIsOneLinePlusHint(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"keys", "get", "--bogus", "k"},
		{"keys", "list", "--limit", "many"},
		{"migrate", "--nope"},
		{"version", "--x"},
		{"proxy", "--frobnicate"},
	} {
		name := args[0]
		if name == "keys" {
			name += " " + args[1]
		}
		code, out, errs := runCLI(t, args...)
		lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "idem "+name+": ") || lines[1] != "Run 'idem "+name+" --help' for usage." {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}

func TestFlagsAfterPositionalArguments(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatal(errs)
	}
	// KEY first, flags after; and "--" ends the flags.
	code, _, errs := runCLI(t, "keys", "get", "order-1", "--store", dsn)
	if code != 1 || !strings.Contains(errs, `no record for key "order-1"`) {
		t.Errorf("KEY before flags: exit %d, stderr %q", code, errs)
	}
	code, _, errs = runCLI(t, "keys", "get", "--store", dsn, "--", "--result")
	if code != 1 || !strings.Contains(errs, `no record for key "--result"`) {
		t.Errorf("-- then a key that looks like a flag: exit %d, stderr %q", code, errs)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, errs := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "idem ") || !strings.Contains(out, "go1.") {
		t.Fatalf("idem version: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/idemkit/idem", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine(info), "idem v1.2.3 (revision 0123456789ab, 2026-11-30T10:00:00Z, modified) go1.26.0"; got != want {
		t.Errorf("versionLine = %q, want %q", got, want)
	}
	info.Settings = nil
	if got, want := versionLine(info), "idem v1.2.3 go1.26.0"; got != want {
		t.Errorf("versionLine without VCS = %q, want %q", got, want)
	}
}

// A SQLite file that cannot be opened is named with the operating
// system's reason; a read-only command does not create a missing file.
func TestSQLiteOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missingDir := filepath.Join(dir, "no", "such", "dir", "idem.db")
	code, _, errs := runCLI(t, "migrate", "--store", "sqlite:"+missingDir)
	if code != 1 || errs != "idem migrate: store sqlite:"+missingDir+": cannot open "+missingDir+": no such file or directory\n" {
		t.Errorf("migrate into a missing directory: exit %d, stderr %q", code, errs)
	}
	missing := filepath.Join(dir, "idem.db")
	code, _, errs = runCLI(t, "keys", "list", "--store", "sqlite:"+missing)
	if code != 1 || !strings.Contains(errs, "cannot open "+missing+": no such file or directory") || strings.Count(errs, "\n") != 1 {
		t.Errorf("keys list of a missing file: exit %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keys list created %s: %v", missing, err)
	}
	code, _, errs = runCLI(t, "keys", "get", "--store", "sqlite:"+dir, "k")
	if code != 1 || !strings.Contains(errs, "cannot open "+dir+": is a directory") {
		t.Errorf("keys get on a directory: exit %d, stderr %q", code, errs)
	}
}

// MySQL DSNs in go-sql-driver's form are accepted (they become the
// mysql:// form, with the password redacted); forms the store cannot use
// name the mysql:// form.
func TestMySQLDriverDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"root@tcp(127.0.0.1:3306)/test":                   "mysql://root@127.0.0.1:3306/test",
		"u:hunter22@tcp(db.local:3307)/app?sql_mode=ANSI": "mysql://u:xxxxx@db.local:3307/app?sql_mode=ANSI",
	} {
		d, err := parseStoreDSN(in)
		if err != nil || d.String() != want || d.Kind != "mysql" {
			t.Errorf("parseStoreDSN(%q) = %q, %v; want %q", in, d, err, want)
		}
	}
	for _, in := range []string{"u:hunter22@unix(/run/mysqld.sock)/app", "u:hunter22@tcp(127.0.0.1:3306)/", "u:hunter22@tcp(127.0.0.1:3306"} {
		_, err := parseStoreDSN(in)
		if err == nil || !strings.Contains(err.Error(), "mysql://user:pass@host:port/db") || strings.Contains(err.Error(), "hunter22") {
			t.Errorf("parseStoreDSN(%q): %v; want an error naming the mysql:// form, without the password", in, err)
		}
	}
	// Through the command line, against a port where nothing listens.
	code, _, errs := runCLI(t, "migrate", "--store", "root:hunter22@tcp(127.0.0.1:1)/test")
	if code != 1 || !strings.Contains(errs, "mysql://root:xxxxx@127.0.0.1:1/test") || strings.Contains(errs, "hunter22") {
		t.Errorf("migrate with a go-sql-driver DSN: exit %d, stderr %q", code, errs)
	}
}

// keys get takes the key as the client sent it (quoted or bare) and
// computes the proxy's scope from the client's headers.
func TestKeysGetAsTheProxySawIt(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatal(errs)
	}
	// The record as the proxy writes it: scope from the Authorization
	// header, key from the Idempotency-Key header.
	r := httptest.NewRequest(http.MethodPost, "/charges", nil)
	r.Header.Set("Authorization", "Bearer t0k3n")
	scope, err := proxyScopeFunc(nil, false)(r)
	if err != nil {
		t.Fatal(err)
	}
	id, err := httpidem.ParseKey(`"order-17"`)
	if err != nil {
		t.Fatal(err)
	}
	putCompleted(t, dsn, idem.MustKey(scope, id), "receipt-17")

	for _, keyArg := range []string{`"order-17"`, `order-17`, ` "order-17" `} {
		code, out, errs := runCLI(t, "keys", "get", "--store", dsn, "--header", "Authorization: Bearer t0k3n", keyArg)
		if code != 0 || !strings.Contains(out, "state:       completed") {
			t.Errorf("keys get %q: exit %d, stdout %q, stderr %q", keyArg, code, out, errs)
		}
	}
	// The proxy compares the Authorization scheme case-insensitively, and so
	// does keys get: it uses the proxy's own scope function.
	if code, out, errs := runCLI(t, "keys", "get", "--store", dsn, "--header", "authorization: bearer  t0k3n", "order-17"); code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("keys get with the scheme in lower case: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Another caller's token, or no header at all, is another scope.
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "--header", "Authorization: Bearer other", `"order-17"`); code != 1 || !strings.Contains(errs, "no record") {
		t.Errorf("other token: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, `"order-17"`); code != 1 || !strings.Contains(errs, "anonymous scope") {
		t.Errorf("no header: exit %d, stderr %q", code, errs)
	}
	// --scope-header picks the headers the proxy was told to use.
	r.Header.Set("X-Tenant", "t-9")
	tenantScope, _ := proxyScopeFunc([]string{"X-Tenant"}, false)(r)
	putCompleted(t, dsn, idem.MustKey(tenantScope, "order-18"), "receipt-18")
	if code, out, errs := runCLI(t, "keys", "get", "--store", dsn, "--scope-header", "X-Tenant", "--header", "x-tenant: t-9", "--result", "order-18"); code != 0 || !strings.HasSuffix(out, "receipt-18") {
		t.Errorf("--scope-header: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "--scope", "s", "--header", "Authorization: x", "k"); code != 2 || !strings.Contains(errs, "exclusive") {
		t.Errorf("--scope with --header: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "keys", "get", "--store", dsn, "--header", "no colon", "k"); code != 2 || !strings.Contains(errs, "Name: value") {
		t.Errorf("malformed --header: exit %d, stderr %q", code, errs)
	}
}

// putCompleted stores a completed record for key in the store dsn names.
func putCompleted(t *testing.T, dsn string, key idem.Key, result string) {
	t.Helper()
	store := openDSN(t, dsn)
	ctx := context.Background()
	c, err := store.Begin(ctx, idem.BeginRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, c.Owner, []byte(result)); err != nil {
		t.Fatal(err)
	}
}

func TestKeysList(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatal(errs)
	}
	done := idem.MustKey("t", "done")
	putCompleted(t, dsn, done, "ok")
	d, _ := storeurl.Parse(dsn)
	h, err := storeurl.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	running := idem.MustKey("t", "running")
	if _, err := h.Store.Begin(context.Background(), idem.BeginRequest{Key: running, Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}

	forwarded := idem.MustKey("t", "forwarded")
	c, err := h.Store.Begin(context.Background(), idem.BeginRequest{Key: forwarded, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.MarkStarted(context.Background(), c.Owner); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runCLI(t, "keys", "list", "--store", dsn)
	if code != 0 || !strings.Contains(out, done.Digest().String()) || !strings.Contains(out, running.Digest().String()) || !strings.HasSuffix(out, "3 records\n") {
		t.Fatalf("keys list: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, _ = runCLI(t, "keys", "list", "--store", dsn, "--state", "started")
	if code != 0 || !strings.Contains(out, forwarded.Digest().String()+"  in_progress  yes") || !strings.HasSuffix(out, "1 records\n") {
		t.Errorf("keys list --state started: %q", out)
	}
	code, out, _ = runCLI(t, "keys", "get", "--store", dsn, "--scope", "t", "forwarded")
	if code != 0 || !strings.Contains(out, "started:     true") {
		t.Errorf("keys get of a started record: %q", out)
	}
	code, out, _ = runCLI(t, "keys", "list", "--store", dsn, "--state", "in_progress")
	if code != 0 || strings.Contains(out, done.Digest().String()) || !strings.Contains(out, running.Digest().String()) || !strings.Contains(out, "in_progress") {
		t.Errorf("keys list --state in_progress: %q", out)
	}
	code, out, _ = runCLI(t, "keys", "list", "--store", dsn, "--limit", "1")
	if code != 0 || !strings.HasSuffix(out, "1 records\n") || !strings.Contains(out, forwarded.Digest().String()) {
		t.Errorf("keys list --limit 1 (newest first): %q", out)
	}
	for _, bad := range [][]string{{"--state", "done"}, {"--limit", "0"}, {"extra"}} {
		if code, _, errs := runCLI(t, append([]string{"keys", "list", "--store", dsn}, bad...)...); code != 2 {
			t.Errorf("keys list %v: exit %d, stderr %q", bad, code, errs)
		}
	}
}

// The real binary prints a Redis outage once, as its error, on one line:
// the Redis client (rueidis) writes no log lines of its own.
func TestRedisOutageIsOneLine(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(idemBin, "keys", "purge", "--store", "redis://127.0.0.1:1/0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("keys purge on a refused Redis: %v, stderr %q", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "idem keys purge: ") || !strings.Contains(lines[0], "unavailable") {
		t.Errorf("stderr is not the command's one-line unavailable error:\n%s", stderr.String())
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain": "plain",
		"connect to x:\n\ta: refused\n\ta: refused": "connect to x: a: refused",
		"a\n\nb\n": "a: b",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHelpFlagsOneStyle: every command's help lists its flags as they are
// typed, --flag, never Go's -flag.
func TestHelpFlagsOneStyle(t *testing.T) {
	t.Parallel()
	single := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, c := range commandTable() {
		code, out, errs := runCLI(t, append([]string{"help"}, strings.Fields(c.Name)...)...)
		if code != 0 {
			t.Errorf("idem help %s: exit %d: %s", c.Name, code, errs)
			continue
		}
		if m := single.FindString(out); m != "" {
			t.Errorf("idem help %s lists a flag as %q: want --flag\n%s", c.Name, strings.TrimSpace(m), out)
		}
	}
	_, out, _ := runCLI(t, "help", "proxy")
	if !strings.Contains(out, "in hold mode a restart forgets the forwarded marks") {
		t.Errorf("idem help proxy does not say that memory: forgets the hold marks on a restart:\n%s", out)
	}
}
