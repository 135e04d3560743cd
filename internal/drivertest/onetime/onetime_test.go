package onetime_test

import (
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting wraps a store and counts the calls that reach it.
type counting struct {
	onetime.Store
	calls atomic.Int64
}

func (c *counting) Consume(ctx context.Context, tok, scope onetime.Digest, use onetime.Use) error {
	c.calls.Add(1)
	return c.Store.Consume(ctx, tok, scope, use)
}

func newTokens(t *testing.T, cfg *onetime.Config) (*onetime.Tokens, *counting) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+testenv.SQLitePath(t)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := &counting{Store: s}
	tokens, err := onetime.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tokens, c
}

func TestIssueFormat(t *testing.T) {
	tokens, _ := newTokens(t, nil)
	seen := map[string]bool{}
	for range 50 {
		tok, err := tokens.Issue(context.Background(), "u:1")
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != onetime.TokenLen || strings.ContainsAny(tok, "+/=") {
			t.Fatalf("token %q: want %d base64url characters", tok, onetime.TokenLen)
		}
		if err := idem.ValidateID(tok); err != nil {
			t.Fatalf("token is not a valid idempotency key: %v", err)
		}
		if seen[tok] {
			t.Fatal("token issued twice")
		}
		seen[tok] = true
	}
}

func TestScopeValidation(t *testing.T) {
	tokens, _ := newTokens(t, nil)
	ctx := context.Background()
	var se *onetime.ScopeError
	if _, err := tokens.Issue(ctx, ""); !errors.As(err, &se) {
		t.Fatalf("Issue with an empty scope: %v, want *ScopeError", err)
	}
	if _, err := tokens.Issue(ctx, strings.Repeat("x", idem.MaxScopeLen+1)); !errors.As(err, &se) {
		t.Fatalf("Issue with a huge scope: %v, want *ScopeError", err)
	}
	if err := tokens.Consume(ctx, "", strings.Repeat("A", onetime.TokenLen)); !errors.As(err, &se) {
		t.Fatalf("Consume with an empty scope: %v, want *ScopeError", err)
	}
}

// TestMalformedNeverReachesStore: strings Issue cannot have made are
// unknown without a round trip.
func TestMalformedNeverReachesStore(t *testing.T) {
	tokens, c := newTokens(t, nil)
	for _, tok := range []string{"", "short", strings.Repeat("A", onetime.TokenLen+1), strings.Repeat("+", onetime.TokenLen), strings.Repeat("A", onetime.TokenLen-1) + "="} {
		if err := tokens.Consume(context.Background(), "u:1", tok); !errors.Is(err, onetime.ErrUnknown) || !onetime.IsRejected(err) {
			t.Fatalf("Consume(%q): %v, want ErrUnknown", tok, err)
		}
	}
	if n := c.calls.Load(); n != 0 {
		t.Fatalf("%d malformed tokens reached the store", n)
	}
}

func TestTakeRestore(t *testing.T) {
	tokens, _ := newTokens(t, nil)
	ctx := context.Background()
	tok, _ := tokens.Issue(ctx, "u:1")
	r, err := tokens.Take(ctx, "u:1", tok, onetime.NewUse())
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Consume(ctx, "u:1", tok); !errors.Is(err, onetime.ErrUsed) {
		t.Fatalf("Consume while taken: %v", err)
	}
	if err := tokens.Restore(ctx, r); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if err := tokens.Restore(ctx, r); !errors.Is(err, onetime.ErrNotHeld) {
		t.Fatalf("second Restore: %v, want ErrNotHeld", err)
	}
	if err := tokens.Restore(ctx, onetime.Receipt{}); !errors.Is(err, onetime.ErrNotHeld) {
		t.Fatalf("zero Receipt: %v, want ErrNotHeld", err)
	}
	if err := tokens.Consume(ctx, "u:1", tok); err != nil {
		t.Fatalf("Consume after Restore: %v", err)
	}
	if err := tokens.Restore(ctx, onetime.NewReceipt(tok, r.Use())); !errors.Is(err, onetime.ErrNotHeld) {
		t.Fatalf("Restore after another consumer spent it: %v, want ErrNotHeld", err)
	}
}

func TestExpiryFromConfig(t *testing.T) {
	tokens, _ := newTokens(t, &onetime.Config{TTL: 100 * time.Millisecond})
	ctx := context.Background()
	tok, _ := tokens.Issue(ctx, "u:1")
	time.Sleep(400 * time.Millisecond)
	if err := tokens.Consume(ctx, "u:1", tok); !errors.Is(err, onetime.ErrExpired) {
		t.Fatalf("Consume after the TTL: %v, want ErrExpired", err)
	}
}

func TestUseFor(t *testing.T) {
	k1, k2 := idem.MustKey("s", "a"), idem.MustKey("s", "b")
	u1 := onetime.UseFor(idem.Owner{Key: k1, Fence: 7})
	if u1 != (onetime.Use{ID: onetime.UseFor(idem.Owner{Key: k1, Fence: 9}).ID, Fence: 7}) {
		t.Fatal("UseFor: the ID must depend only on the key")
	}
	if u1.ID == onetime.UseFor(idem.Owner{Key: k2}).ID {
		t.Fatal("UseFor: two keys share an ID")
	}
	if got := (onetime.Use{Fence: 42}).FenceString(); got != "00000000000000000042" {
		t.Fatalf("FenceString = %q", got)
	}
	if got := (onetime.Use{Fence: 1<<64 - 1}).FenceString(); len(got) != 20 {
		t.Fatalf("FenceString of max = %q", got)
	}
}

func TestDigestsAreDomainSeparated(t *testing.T) {
	if onetime.TokenDigest("x") == onetime.ScopeDigest("x") {
		t.Fatal("a token and a scope with the same text share a digest")
	}
}

func TestConfig(t *testing.T) {
	if _, err := onetime.New(nil, nil); err == nil {
		t.Error("nil store accepted")
	}
	s := &counting{}
	if _, err := onetime.New(s, &onetime.Config{TTL: -time.Second}); err == nil {
		t.Error("negative TTL accepted")
	}
	tk, err := onetime.New(s, nil)
	if err != nil || tk.TTL() != onetime.DefaultTTL {
		t.Fatalf("defaults: %v, TTL %v", err, tk.TTL())
	}
}

// TestNoHeavyDeps: importing onetime pulls in no driver, no Redis client and
// no net/http.
func TestNoHeavyDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/idemkit/idem/onetime").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"net/http", "github.com/redis/", "github.com/jackc/", "github.com/go-sql-driver/", "modernc.org/", "github.com/prometheus/", "database/sql"} {
			if dep == bad || strings.HasPrefix(dep, bad) && strings.HasSuffix(bad, "/") {
				t.Errorf("onetime depends on %s", dep)
			}
		}
	}
}

// nothingStore answers every Consume with ErrUnknown and counts calls.
type nothingStore struct {
	onetime.Store
	calls atomic.Int64
}

func (n *nothingStore) Consume(context.Context, onetime.Digest, onetime.Digest, onetime.Use) error {
	n.calls.Add(1)
	return onetime.ErrUnknown
}

// FuzzPresentedToken: whatever a client presents, Consume answers a
// rejection, never panics, and only asks the store about strings Issue could
// have produced.
func FuzzPresentedToken(f *testing.F) {
	f.Add("")
	f.Add(strings.Repeat("A", onetime.TokenLen))
	f.Add(strings.Repeat("-", onetime.TokenLen-1) + "\x00")
	f.Add("\"quoted\"")
	f.Fuzz(func(t *testing.T, tok string) {
		s := &nothingStore{}
		tokens, err := onetime.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tokens.Consume(context.Background(), "u:1", tok); !errors.Is(err, onetime.ErrUnknown) {
			t.Fatalf("Consume(%q) = %v", tok, err)
		}
		wellFormed := len(tok) == onetime.TokenLen && strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") == ""
		if got := s.calls.Load() == 1; got != wellFormed {
			t.Fatalf("Consume(%q) reached the store: %v, want %v", tok, got, wellFormed)
		}
	})
}
