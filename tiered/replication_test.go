package tiered_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/tiered"
)

// reporting is a memstore that reports a fixed replication.
type reporting struct {
	*memstore.Store
	r   idem.Replication
	err error
}

func (s reporting) Replication(context.Context) (idem.Replication, error) { return s.r, s.err }

// TestReplicationIsTheDurableStores: tiered reports its durable store's
// mode, replicas and waits, whatever the fast store's are, and names both
// in Detail; an error of the durable store is returned; a durable store
// that does not report gives unknown.
func TestReplicationIsTheDurableStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mf, md := memstore.New(nil), memstore.New(nil)
	defer mf.Close()
	defer md.Close()
	fast := reporting{mf, idem.Replication{Mode: idem.ReplicationAsynchronous, Replicas: 1, Detail: "role=master connected_slaves=1"}, nil}
	durable := reporting{md, idem.Replication{Mode: idem.ReplicationSynchronous, Replicas: 1, Waits: 1, Detail: "synchronous_commit=on"}, nil}
	s, err := tiered.New(fast, durable, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Replication(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mode != idem.ReplicationSynchronous || r.Replicas != 1 || r.Waits != 1 ||
		!strings.Contains(r.Detail, "synchronous_commit=on") || !strings.Contains(r.Detail, "connected_slaves=1") {
		t.Fatalf("Replication = %+v; want the durable store's, with both details", r)
	}

	boom := errors.New("boom")
	s, _ = tiered.New(fast, reporting{md, idem.Replication{}, boom}, nil)
	if _, err := s.Replication(ctx); !errors.Is(err, boom) {
		t.Fatalf("Replication with a failing durable store = %v, want its error", err)
	}

	s, _ = tiered.New(fast, md, nil)
	if r, err := s.Replication(ctx); err != nil || r.Mode != idem.ReplicationUnknown {
		t.Fatalf("Replication with a durable store that does not report = %+v, %v; want unknown", r, err)
	}
}
