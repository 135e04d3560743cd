package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemkit/idem"
)

// List returns up to limit records, newest first (by CreatedAt): those in
// state (StateHeld: the held ones; StateCompleted: the others), or in
// any state when state is 0, and, when startedOnly is set,
// only those with the Started mark. Expired records not swept yet are
// included, with their ExpiresAt in the past. Results are not returned
// (Record.Result is nil); Get a record for its result.
//
// List is for operators ('idem keys list'): it locks one shard at a time
// and copies every matching record of the shard, so Begin on other shards
// never waits, but the list is no snapshot of the whole store.
func (s *Store) List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error) {
	if limit <= 0 {
		return nil, configError("limit", "must be positive")
	}
	if state != 0 && state.String() == "invalid" {
		return nil, configError("state", fmt.Sprintf("unknown state %d", state))
	}
	var out []idem.Record
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for d, e := range sh.records {
			rec := s.record(d, &e, sh)
			if (state == 0 || rec.State == state) && (!startedOnly || e.started) {
				out = append(out, rec)
			}
		}
		sh.mu.Unlock()
		// Keep the newest limit records only, so memory stays bounded by
		// limit plus one shard.
		if len(out) > limit {
			sortNewestFirst(out)
			out = out[:limit]
		}
	}
	sortNewestFirst(out)
	return out, nil
}

func sortNewestFirst(recs []idem.Record) {
	slices.SortFunc(recs, func(a, b idem.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return slices.Compare(a.Digest[:], b.Digest[:])
	})
}
