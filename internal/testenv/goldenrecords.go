package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// GoldenScenarios are the records a store's golden test pins, by name: one
// of each state a record can be in, with and without the Started mark, and
// a result with bytes that need escaping.
var GoldenScenarios = []string{"in_progress", "in_progress_started", "completed", "completed_started", "released"}

// GoldenResult is the result the completed scenarios store.
var GoldenResult = []byte("{\"charge\":\"ch_1\"}\x00\xff\r\n")

// GoldenLease and GoldenRetention are the scenarios' lease and retention.
const (
	GoldenLease     = 30 * time.Second
	GoldenRetention = 24 * time.Hour
)

// GoldenKey is the key of scenario name under scope (a test's own, so that
// reruns on a shared server never meet).
func GoldenKey(scope, name string) idem.Key { return idem.MustKey(scope, "golden-"+name) }

// GoldenFingerprint is the fingerprint of scenario name.
func GoldenFingerprint(name string) idem.Fingerprint { return idem.FingerprintOf([]byte(name)) }

// WriteGoldenScenarios writes every scenario to s through the Store
// contract (Begin, MarkStarted, Complete, Release), under scope.
func WriteGoldenScenarios(tb testing.TB, ctx context.Context, s idem.Store, scope string) {
	tb.Helper()
	for _, name := range GoldenScenarios {
		claim := goldenBegin(tb, ctx, s, scope, name)
		var err error
		switch name {
		case "in_progress_started", "completed_started":
			if err := s.MarkStarted(ctx, claim.Owner); err != nil {
				tb.Fatalf("%s: MarkStarted: %v", name, err)
			}
		}
		switch name {
		case "completed", "completed_started":
			err = s.Complete(ctx, claim.Owner, GoldenResult)
		case "released":
			err = s.Release(ctx, claim.Owner)
		}
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
	}
}

// goldenBegin acquires scenario name under scope with the golden lease
// and retention.
func goldenBegin(tb testing.TB, ctx context.Context, s idem.Store, scope, name string) idem.Claim {
	tb.Helper()
	claim, err := s.Begin(ctx, idem.BeginRequest{Key: GoldenKey(scope, name), Fingerprint: GoldenFingerprint(name),
		Lease: GoldenLease, Retention: GoldenRetention})
	if err != nil || claim.Outcome != idem.Acquired {
		tb.Fatalf("%s: Begin = %+v, %v", name, claim, err)
	}
	return claim
}

// Fixed values a golden test writes into raw records to read them back:
// times in 2100, so that nothing has expired.
var (
	GoldenCreated = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	GoldenFence   = uint64(4102444800000007)
	GoldenOwner   = [16]byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01}
)

// CheckGoldenRecord checks that rec, read back from the raw record of
// scenario name written with the fixed values above, is what the scenario
// means.
func CheckGoldenRecord(tb testing.TB, name string, key idem.Key, rec idem.Record) {
	tb.Helper()
	want := idem.Record{Digest: key.Digest(), Fingerprint: GoldenFingerprint(name), Fence: GoldenFence,
		CreatedAt: GoldenCreated, ExpiresAt: GoldenCreated.Add(GoldenRetention)}
	switch name {
	case "in_progress", "in_progress_started":
		want.State = idem.StateInProgress
		want.LeaseUntil = GoldenCreated.Add(GoldenLease)
	case "completed", "completed_started":
		want.State = idem.StateCompleted
		want.Result = GoldenResult
	case "released":
		want.State = idem.StateReleased
	}
	want.Started = name == "in_progress_started" || name == "completed_started"
	if rec.Digest != want.Digest || rec.State != want.State || rec.Fingerprint != want.Fingerprint ||
		rec.Fence != want.Fence || string(rec.Result) != string(want.Result) || !rec.CreatedAt.Equal(want.CreatedAt) ||
		!rec.LeaseUntil.Equal(want.LeaseUntil) || !rec.ExpiresAt.Equal(want.ExpiresAt) || rec.Started != want.Started {
		tb.Errorf("%s: the committed record reads as\n %+v\nwant\n %+v", name, rec, want)
	}
}
