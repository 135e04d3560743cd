package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/redis/redisstore"
)

// TestNewRefusesClientsThatIgnoreDeadlines: go-redis without
// ContextTimeoutEnabled waits for its ReadTimeout whatever the context
// says; New refuses every client kind created that way, and a client it
// cannot inspect unless told.
func TestNewRefusesClientsThatIgnoreDeadlines(t *testing.T) {
	addr := "127.0.0.1:1"
	blind := []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: addr}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}),
		redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}}),
		redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}}),
	}
	careful := []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: true}),
		redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}),
		redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: true}),
	}
	for _, c := range append(blind, careful...) {
		t.Cleanup(func() { c.Close() })
	}
	for _, c := range blind {
		_, err := redisstore.New(c, nil)
		configtest.Want(t, err, "redisstore", "client")
		if err != nil && !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
			t.Errorf("New(%T without ContextTimeoutEnabled) = %v, want it to name ContextTimeoutEnabled", c, err)
		}
	}
	for _, c := range careful {
		if _, err := redisstore.New(c, nil); err != nil {
			t.Errorf("New(%T with ContextTimeoutEnabled) = %v", c, err)
		}
	}
	w := wrapped{careful[0]}
	_, err := redisstore.New(w, nil)
	configtest.Want(t, err, "redisstore", "client") // a wrapper it cannot inspect
	if _, err := redisstore.New(w, &redisstore.Config{AssumeContextTimeouts: true}); err != nil {
		t.Errorf("New(wrapper, AssumeContextTimeouts) = %v", err)
	}
}

type wrapped struct{ redis.UniversalClient }

// TestOwnTokenIsNotInFlight: a Begin that runs again with the same token
// (a command resent after its answer was lost) is told Acquired again,
// same fence, never InFlight; another token is InFlight.
func TestOwnTokenIsNotInFlight(t *testing.T) {
	s, _, _ := newStore(t, nil)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Lease: time.Minute}
	tok := idem.NewToken()
	first, err := s.BeginWithToken(ctx, req, tok)
	if err != nil || first.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", first, err)
	}
	again, err := s.BeginWithToken(ctx, req, tok)
	if err != nil || again.Outcome != idem.Acquired || again.Owner != first.Owner || again.Takeover != first.Takeover {
		t.Fatalf("Begin again with the same token = %+v, %v; want %+v", again, err, first)
	}
	if other, err := s.Begin(ctx, req); err != nil || other.Outcome != idem.InFlight {
		t.Fatalf("Begin with another token = %+v, %v; want InFlight", other, err)
	}
	if err := s.Complete(ctx, first.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.BeginWithToken(ctx, req, tok); err != nil || r.Outcome != idem.Replay {
		t.Fatalf("Begin with the same token after Complete = %+v, %v; want Replay", r, err)
	}
}

// TestCompleteUntil lowers the expiry (never raises it); a cap in the past
// removes the record at once.
func TestCompleteUntil(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t), Retention: time.Hour}
	cl, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(10 * time.Minute).Truncate(time.Microsecond)
	if err := s.CompleteUntil(ctx, cl.Owner, []byte("r"), until); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil || rec.State != idem.StateCompleted || !rec.ExpiresAt.Equal(until) {
		t.Fatalf("record = %+v, %v; want completed, expiring at %v", rec, err, until)
	}
	if d, _ := c.PTTL(ctx, s.Key(req.Key)).Result(); d <= 0 || d > 10*time.Minute {
		t.Errorf("PTTL = %v, want at most 10m", d)
	}

	// A cap later than the expiry changes nothing.
	req2 := idem.BeginRequest{Key: key(t), Retention: time.Minute}
	cl2, _ := s.Begin(ctx, req2)
	if err := s.CompleteUntil(ctx, cl2.Owner, []byte("r"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.PTTL(ctx, s.Key(req2.Key)).Result(); d <= 0 || d > time.Minute+time.Millisecond {
		t.Errorf("PTTL after a later cap = %v, want ≤ 1m", d)
	}

	// A cap in the past: gone.
	req3 := idem.BeginRequest{Key: key(t)}
	cl3, _ := s.Begin(ctx, req3)
	if err := s.CompleteUntil(ctx, cl3.Owner, []byte("r"), time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, req3.Key); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get after a past cap = %v, want ErrNotFound", err)
	}
	// Owner checks as Complete.
	if err := s.CompleteUntil(ctx, idem.Owner{Key: req.Key, Token: idem.NewToken()}, nil, until); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("CompleteUntil by a stranger = %v, want ErrLeaseLost", err)
	}
}

// TestAdoptAndForget: Adopt replaces whatever the key holds with a claim of
// the given token, with a larger fence; Forget deletes the record.
func TestAdoptAndForget(t *testing.T) {
	s, _, _ := newStore(t, nil)
	ctx := ctxT(t)
	k := key(t)
	old := idem.BeginRequest{Key: k, Fingerprint: idem.FingerprintOf([]byte("old")), Lease: time.Minute}
	c, _ := s.Begin(ctx, old)
	if err := s.Complete(ctx, c.Owner, []byte("stale")); err != nil {
		t.Fatal(err)
	}
	nu := old
	nu.Fingerprint = idem.FingerprintOf([]byte("new"))
	tok := idem.NewToken()
	o, err := s.Adopt(ctx, nu, tok)
	if err != nil || o.Token != tok || o.Fence <= c.Owner.Fence {
		t.Fatalf("Adopt = %+v, %v; want token kept and fence > %d", o, err, c.Owner.Fence)
	}
	rec, err := s.Get(ctx, k)
	if err != nil || rec.State != idem.StateInProgress || rec.Fingerprint != nu.Fingerprint || rec.Result != nil {
		t.Fatalf("record after Adopt = %+v, %v", rec, err)
	}
	if d, err := s.Begin(ctx, nu); err != nil || d.Outcome != idem.InFlight {
		t.Errorf("Begin(new) after Adopt = %+v, %v; want InFlight", d, err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("old owner's Complete after Adopt = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, o, []byte("fresh")); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get after Forget = %v", err)
	}
	if _, err := s.Adopt(context.Background(), nu, idem.Token{}); err == nil {
		t.Error("Adopt with a zero token succeeded")
	}
}

// TestOlderRecordsStillRead: a version-1 record written before the m and
// tk fields existed reads as not started, and every operation works on it.
func TestOlderRecordsStillRead(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	k := key(t)
	fp := idem.FingerprintOf([]byte("a"))
	tok := idem.NewToken()
	now := time.Now()
	us := func(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }
	if err := c.HSet(ctx, s.Key(k), "v", "1", "s", "p", "fp", string(fp[:]), "tok", string(tok[:]),
		"f", "7", "c", us(now), "lu", us(now.Add(time.Minute)), "x", us(now.Add(time.Hour))).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil || rec.Started || rec.State != idem.StateInProgress || rec.Fence != 7 {
		t.Fatalf("old record = %+v, %v", rec, err)
	}
	owner := idem.Owner{Key: k, Token: tok, Fence: 7}
	if err := s.MarkStarted(ctx, owner); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Begin(ctx, idem.BeginRequest{Key: k, Fingerprint: fp}); err != nil || string(r.Result) != "r" {
		t.Errorf("replay = %+v, %v", r, err)
	}
}
