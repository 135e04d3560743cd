package sqlstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
)

func TestSyncStandbysWaited(t *testing.T) {
	t.Parallel()
	for names, want := range map[string]int{
		"": 0, "  ": 0, "*": 1, "s1": 1, "s1, s2": 1, "FIRST 2 (s1, s2, s3)": 2,
		"ANY 2 (a,b,c)": 2, "any 3(a, b, c)": 3, "2 (s1, s2)": 2, `"FIRST"`: 1,
	} {
		if got := syncStandbysWaited(names); got != want {
			t.Errorf("syncStandbysWaited(%q) = %d, want %d", names, got, want)
		}
	}
}

func TestPostgresVerdict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		recovery                         bool
		names                            string
		standbys, syncs, potential, hide int
		mode                             idem.ReplicationMode
		waits                            int
		detail                           string
	}{
		{names: "", mode: idem.ReplicationSingle},
		{names: "", standbys: 1, mode: idem.ReplicationAsynchronous, detail: "1 async"},
		{names: "", standbys: 2, hide: 2, mode: idem.ReplicationAsynchronous, detail: "hidden"},
		{names: "*", standbys: 1, syncs: 1, mode: idem.ReplicationSynchronous, waits: 1, detail: "1 sync"},
		{names: "ANY 2 (a, b, c)", standbys: 3, syncs: 3, mode: idem.ReplicationSynchronous, waits: 2},
		{names: "*", mode: idem.ReplicationSynchronous, waits: 1, detail: "writes wait"},
		{names: "s1", standbys: 1, hide: 1, mode: idem.ReplicationSynchronous, waits: 1, detail: "hidden"},
		{recovery: true, names: "*", mode: idem.ReplicationUnknown, detail: "standby in recovery"},
	} {
		rep := postgresVerdict(tc.recovery, "off", tc.names, tc.standbys, tc.syncs, tc.potential, tc.hide)
		if rep.Mode != tc.mode || rep.Waits != tc.waits || !strings.Contains(rep.Detail, tc.detail) || !strings.Contains(rep.Detail, "session synchronous_commit=off") {
			t.Errorf("%+v: %+v", tc, rep)
		}
	}
}

// The gate reads the verdict once for many concurrent first Begins, goes
// by the cached verdict until it is stale, then one Begin re-reads it;
// an asynchronous verdict refuses with ErrAsyncReplication and
// ErrUnavailable unless allowed.
func TestReplicationGate(t *testing.T) {
	t.Parallel()
	s, err := New(configtest.NoDB(t), &Config{Dialect: Postgres, ReplicationCheck: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int32
	var mode atomic.Value
	mode.Store(idem.ReplicationSingle)
	release := make(chan struct{})
	readFn := func(ctx context.Context) (idem.Replication, error) {
		reads.Add(1)
		<-release
		return idem.Replication{Mode: mode.Load().(idem.ReplicationMode), Detail: "test"}, nil
	}
	s.readRepl = readFn
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() { errs <- s.replicationGate(context.Background()) })
	}
	time.Sleep(50 * time.Millisecond) // let them pile up behind the first read
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads for 50 concurrent first Begins, want 1", n)
	}

	mode.Store(idem.ReplicationAsynchronous)
	if err := s.replicationGate(context.Background()); err != nil {
		t.Errorf("a fresh verdict is not re-read: %v", err)
	}
	s.repl.Load().at = time.Now().Add(-2 * time.Hour) // stale
	err = s.replicationGate(context.Background())
	if !errors.Is(err, idem.ErrAsyncReplication) || !idem.IsUnavailable(err) || !strings.Contains(err.Error(), "synchronous_standby_names") {
		t.Errorf("stale verdict, now asynchronous: %v", err)
	}
	s.cfg.AllowAsyncReplication = true
	if err := s.replicationGate(context.Background()); err != nil {
		t.Errorf("allowed: %v", err)
	}

	// The first read waits, and a caller whose context ends stops waiting.
	s2, _ := New(configtest.NoDB(t), &Config{Dialect: Postgres})
	block := make(chan struct{})
	s2.readRepl = func(ctx context.Context) (idem.Replication, error) { <-block; return idem.Replication{}, nil }
	go func() { _ = s2.replicationGate(context.Background()) }()
	for len(s2.replSem) == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s2.replicationGate(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a waiting first Begin whose context ended: %v", err)
	}
	close(block)
}
