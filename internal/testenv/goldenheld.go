package testenv

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/idemkit/idem"
)

// GoldenHeldScenarios are the held records a store's golden test pins, by
// name: a key held by Do (Options.AtMostOnce) and one held by httpidem
// (HoldUnknown), each started, as the writers leave them.
var GoldenHeldScenarios = []string{"held_do", "held_http"}

// goldenHeldHTTP is what httpidem v0.1 stored for a held key: the answer
// to POST /charges whose handler had started a 201 and panicked (502
// outcome-unknown problem, flagged outcome-unknown in the encoding).
const goldenHeldHTTP = "69680102f603060d43616368652d436f6e74726f6c01086e6f2d73746f72650e" +
	"436f6e74656e742d4c656e67746801033334380c436f6e74656e742d54797065" +
	"01186170706c69636174696f6e2f70726f626c656d2b6a736f6e114964656d2d" +
	"48656c642d52657175657374010d504f5354202f636861726765730f4964656d" +
	"2d48656c642d53636f7065011065336230633434323938666331633134144964" +
	"656d706f74656e742d526574727961626c65010566616c7365dc027b22747970" +
	"65223a2268747470733a2f2f6769746875622e636f6d2f6964656d6b69742f69" +
	"64656d2f626c6f622f6d61696e2f687474706964656d2f70726f626c656d732e" +
	"6d64236f7574636f6d652d756e6b6e6f776e222c227469746c65223a22546865" +
	"206f7574636f6d65206f6620746865207265717565737420697320756e6b6e6f" +
	"776e222c22737461747573223a3530322c2264657461696c223a227468652072" +
	"657175657374207265616368656420746865207365727669636520627574206e" +
	"6f20636f6d706c65746520616e737765722063616d65206261636b3b20697420" +
	"6d61792068617665206265656e2065786563757465643b206576657279207265" +
	"74727920776974682074686973206b65792067657473207468697320616e7377" +
	"65723a206c6f6f6b20746865206f7065726174696f6e2075702c206f72207573" +
	"652061206e6577206b6579206b6e6f77696e676c79227d"

// GoldenHeldResult is the result the held scenario name stores.
func GoldenHeldResult(name string) []byte {
	if name == "held_do" {
		return idem.OutcomeUnknownResult()
	}
	b, err := hex.DecodeString(goldenHeldHTTP)
	if err != nil {
		panic(err)
	}
	return b
}

// WriteGoldenHeld writes every held scenario to s through the Store
// contract (Begin, MarkStarted, Hold), under scope.
func WriteGoldenHeld(tb testing.TB, ctx context.Context, s idem.Store, scope string) {
	tb.Helper()
	for _, name := range GoldenHeldScenarios {
		claim := goldenBegin(tb, ctx, s, scope, name)
		if err := s.MarkStarted(ctx, claim.Owner); err != nil {
			tb.Fatalf("%s: MarkStarted: %v", name, err)
		}
		if err := s.Hold(ctx, claim.Owner, GoldenHeldResult(name)); err != nil {
			tb.Fatalf("%s: Hold: %v", name, err)
		}
	}
}

// CheckGoldenHeld checks that the held scenarios, written raw under scope
// with the fixed values of the golden files (GoldenFence, GoldenCreated),
// read as held and settle as held records do, through s: Get and Lookup
// say StateHeld with the stored result; List (when s lists) finds them
// among the held; Begin replays the stored bytes and refuses another
// request; Resolve stores a result for held_do (completed, replayed) and
// releases held_http (the next Begin acquires it afresh).
func CheckGoldenHeld(tb testing.TB, ctx context.Context, s idem.Store, scope string) {
	tb.Helper()
	for _, name := range GoldenHeldScenarios {
		key := GoldenKey(scope, name)
		want := idem.Record{Digest: key.Digest(), State: idem.StateHeld, Fingerprint: GoldenFingerprint(name), Fence: GoldenFence,
			Result: GoldenHeldResult(name), CreatedAt: GoldenCreated, ExpiresAt: GoldenCreated.Add(GoldenRetention), Started: true}
		for how, get := range map[string]func() (idem.Record, error){
			"Get":    func() (idem.Record, error) { return s.Get(ctx, key) },
			"Lookup": func() (idem.Record, error) { return idem.Lookup(ctx, s, key.Digest()) },
		} {
			rec, err := get()
			if err != nil {
				tb.Fatalf("%s: %s: %v", name, how, err)
			}
			if rec.Digest != want.Digest || rec.State != want.State || rec.Fingerprint != want.Fingerprint || rec.Fence != want.Fence ||
				!bytes.Equal(rec.Result, want.Result) || !rec.CreatedAt.Equal(want.CreatedAt) || !rec.LeaseUntil.IsZero() ||
				!rec.ExpiresAt.Equal(want.ExpiresAt) || rec.Started != want.Started {
				tb.Errorf("%s: %s reads the golden record as\n %+v\nwant\n %+v", name, how, rec, want)
			}
		}
		c, err := s.Begin(ctx, idem.BeginRequest{Key: key, Fingerprint: GoldenFingerprint(name)})
		if err != nil || c.Outcome != idem.Replay || !bytes.Equal(c.Result, want.Result) {
			tb.Errorf("%s: Begin = %v %q, %v; want a replay of the held result", name, c.Outcome, c.Result, err)
		}
		if c, err := s.Begin(ctx, idem.BeginRequest{Key: key, Fingerprint: GoldenFingerprint("other")}); err != nil || c.Outcome != idem.Mismatch {
			tb.Errorf("%s: Begin of another request = %v, %v; want Mismatch", name, c.Outcome, err)
		}
	}
	if l, ok := s.(interface {
		List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
	}); ok {
		recs, err := l.List(ctx, idem.StateHeld, true, 100000)
		if err != nil {
			tb.Fatalf("List(held): %v", err)
		}
		found := 0
		for _, r := range recs {
			for _, name := range GoldenHeldScenarios {
				if r.Digest == GoldenKey(scope, name).Digest() && r.State == idem.StateHeld {
					found++
				}
			}
		}
		if found != len(GoldenHeldScenarios) {
			tb.Errorf("List(held, started) finds %d of the %d golden held records", found, len(GoldenHeldScenarios))
		}
	}

	do, http := GoldenKey(scope, "held_do"), GoldenKey(scope, "held_http")
	if err := idem.Resolve(ctx, s, idem.Resolution{Digest: do.Digest(), Fence: GoldenFence, Result: []byte("42")}); err != nil {
		tb.Fatalf("Resolve held_do: %v", err)
	}
	if rec, err := s.Get(ctx, do); err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "42" {
		tb.Errorf("held_do after Resolve = %v %q, %v; want completed with 42", rec.State, rec.Result, err)
	}
	if c, err := s.Begin(ctx, idem.BeginRequest{Key: do, Fingerprint: GoldenFingerprint("held_do")}); err != nil || c.Outcome != idem.Replay || string(c.Result) != "42" {
		tb.Errorf("held_do after Resolve: Begin = %v %q, %v; want a replay of 42", c.Outcome, c.Result, err)
	}
	if err := idem.Resolve(ctx, s, idem.Resolution{Digest: http.Digest(), Fence: GoldenFence, Release: true}); err != nil {
		tb.Fatalf("Resolve held_http (release): %v", err)
	}
	c, err := s.Begin(ctx, idem.BeginRequest{Key: http, Fingerprint: GoldenFingerprint("held_http")})
	if err != nil || c.Outcome != idem.Acquired || c.Takeover || c.Started || c.Owner.Fence <= GoldenFence {
		tb.Errorf("held_http after a release: Begin = %+v, %v; want a fresh claim above the golden fence", c, err)
	}
	if err == nil && c.Outcome == idem.Acquired {
		if err := s.Complete(ctx, c.Owner, []byte("done")); err != nil {
			tb.Errorf("held_http: Complete after the release: %v", err)
		}
		if rec, err := s.Get(ctx, http); err != nil || rec.State != idem.StateCompleted {
			tb.Errorf("held_http completed after the release = %v, %v; want completed", rec.State, err)
		}
	}
	if err := idem.Resolve(ctx, s, idem.Resolution{Digest: do.Digest(), Fence: GoldenFence, Release: true}); !errors.Is(err, idem.ErrNotHeld) {
		tb.Errorf("release of the resolved held_do = %v, want ErrNotHeld", err)
	}
}
