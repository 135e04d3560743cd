package idemtest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Lister is a Store that can list its records by state, newest first:
// what `idem keys list` needs of a store.
type Lister interface {
	idem.Store
	List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
}

// RunList checks a store's List, the listing that `idem keys list` uses: it
// puts records in every state into s, sets the Started mark on two of them,
// and checks List's filters, order and limit against Get. Stores that offer
// List run it beside RunStore.
func RunList(t *testing.T, s Lister) {
	t.Helper()
	mark := s.MarkStarted
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tenant := "list-" + idem.NewToken().String()
	key := func(i int) idem.Key { return idem.MustKey(tenant, fmt.Sprintf("order-%d", i)) }
	want := map[idem.State][]idem.Digest{}
	for i := range 9 {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: key(i), Fingerprint: idem.FingerprintOf([]byte{byte(i)})})
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("Begin %d: %v %v", i, c.Outcome, err)
		}
		if i == 0 || i == 4 { // one stays in progress, one is completed
			if err := mark(ctx, c.Owner); err != nil {
				t.Fatalf("mark %d: %v", i, err)
			}
		}
		st := idem.StateInProgress
		switch i % 3 {
		case 1:
			st = idem.StateCompleted
			err = s.Complete(ctx, c.Owner, []byte("receipt"))
		case 2:
			st = idem.StateReleased
			err = s.Release(ctx, c.Owner)
		}
		if err != nil {
			t.Fatal(err)
		}
		want[st] = append(want[st], key(i).Digest())
		time.Sleep(2 * time.Millisecond) // distinct creation times, even at SQLite's millisecond resolution
	}
	ours := func(recs []idem.Record) (out []idem.Record) {
		mine := map[idem.Digest]bool{}
		for i := range 9 {
			mine[key(i).Digest()] = true
		}
		for _, r := range recs {
			if mine[r.Digest] {
				out = append(out, r)
			}
		}
		return out
	}
	all, err := s.List(ctx, 0, false, 1000)
	if err != nil {
		t.Fatal(err)
	}
	mine := ours(all)
	if len(mine) != 9 {
		t.Fatalf("List of every state has %d of the 9 records", len(mine))
	}
	for i, r := range mine {
		// Newest first: order-8 was created last.
		if r.Digest != key(8-i).Digest() {
			t.Errorf("List[%d] is %s, want order-%d's record (newest first)", i, r.Digest, 8-i)
		}
		if r.Result != nil {
			t.Errorf("List returned a result for %s", r.Digest)
		}
		g, err := s.Get(ctx, key(8-i))
		if err != nil {
			t.Fatal(err)
		}
		g.Result = nil
		if !reflect.DeepEqual(normalize(r), normalize(g)) {
			t.Errorf("List record\n%+v\ndiffers from Get\n%+v", r, g)
		}
	}
	for _, st := range []idem.State{idem.StateInProgress, idem.StateCompleted, idem.StateReleased} {
		recs, err := s.List(ctx, st, false, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got := ours(recs)
		if len(got) != len(want[st]) {
			t.Errorf("List(%s) has %d of our records, want %d", st, len(got), len(want[st]))
		}
		for _, r := range recs {
			if r.State != st {
				t.Errorf("List(%s) returned a record in state %s", st, r.State)
			}
		}
	}
	started, err := s.List(ctx, 0, true, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := ours(started)
	if len(got) != 2 || got[0].Digest != key(4).Digest() || got[1].Digest != key(0).Digest() || !got[0].Started || !got[1].Started {
		t.Errorf("List(started) = %+v, want order-4's and order-0's records", got)
	}
	for _, r := range started {
		if !r.Started {
			t.Errorf("List(started) returned %s without the mark", r.Digest)
		}
	}
	if got, err := s.List(ctx, idem.StateCompleted, true, 1000); err != nil || len(ours(got)) != 1 || ours(got)[0].Digest != key(4).Digest() {
		t.Errorf("List(completed, started) = %+v, %v; want order-4's record", ours(got), err)
	}
	first, err := s.List(ctx, 0, false, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 {
		t.Fatalf("List with limit 2 returned %d records", len(first))
	}
	if _, err := s.List(ctx, 0, false, 0); err == nil {
		t.Error("List with limit 0 did not fail")
	}
}

// normalize drops what Get and List may legitimately render differently:
// monotonic clock readings and locations.
func normalize(r idem.Record) idem.Record {
	for _, p := range []*time.Time{&r.CreatedAt, &r.LeaseUntil, &r.ExpiresAt} {
		if !p.IsZero() {
			*p = time.UnixMicro(p.UnixMicro())
		}
	}
	return r
}

// PrefixFinder is a Store that finds records by the beginning of their
// digest: what a lookup by the digest prefix shown in log lines needs
// (`idem keys`, the proxy's /ops API).
type PrefixFinder interface {
	idem.Store
	DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error)
}

// RunDigestsWithPrefix checks a store's DigestsWithPrefix: it puts 64
// records into s and checks that every record is found by its 16-digit
// prefix (the form log lines carry), in either case, and by its whole
// digest; that a one-digit prefix returns at most limit digests, all
// beginning with it; that a prefix no record has returns none; and that
// bad prefixes and limits are refused.
func RunDigestsWithPrefix(t *testing.T, s PrefixFinder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tenant := "prefix-" + idem.NewToken().String()
	var digests []idem.Digest
	for i := range 64 {
		k := idem.MustKey(tenant, fmt.Sprintf("order-%d", i))
		c, err := s.Begin(ctx, idem.BeginRequest{Key: k})
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("Begin %d: %v %v", i, c.Outcome, err)
		}
		if i%2 == 0 {
			if err := s.Complete(ctx, c.Owner, []byte("receipt")); err != nil {
				t.Fatal(err)
			}
		}
		digests = append(digests, k.Digest())
	}
	for _, d := range digests {
		for _, p := range []string{d.String()[:16], strings.ToUpper(d.String()[:16]), d.String()} {
			got, err := s.DigestsWithPrefix(ctx, p, 2)
			if err != nil {
				t.Fatalf("DigestsWithPrefix(%s): %v", p, err)
			}
			if len(got) != 1 || got[0] != d {
				t.Fatalf("DigestsWithPrefix(%s) = %v, want [%s]", p, got, d)
			}
		}
	}
	// Every hex digit begins some of the 64 digests (with overwhelming
	// probability): a one-digit prefix matches several, limit bounds them.
	first := digests[0].String()[:1]
	got, err := s.DigestsWithPrefix(ctx, first, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0].String(), first) {
		t.Errorf("DigestsWithPrefix(%s, limit 1) = %v", first, got)
	}
	// A digest no record has: flip the last digit of a known one.
	d := digests[1].String()
	missing := d[:63] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", d[63])+1)%16])
	if got, err := s.DigestsWithPrefix(ctx, missing, 2); err != nil || len(got) != 0 {
		t.Errorf("DigestsWithPrefix(absent digest) = %v, %v; want none", got, err)
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("a", 65)} {
		if _, err := s.DigestsWithPrefix(ctx, bad, 2); err == nil {
			t.Errorf("DigestsWithPrefix(%q) did not fail", bad)
		}
	}
	if _, err := s.DigestsWithPrefix(ctx, first, 0); err == nil {
		t.Error("DigestsWithPrefix with limit 0 did not fail")
	}
}
