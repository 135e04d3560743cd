package memstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

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
			rec := s.record(d, &e)
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

// DigestsWithPrefix returns the digests of up to limit records whose digest,
// in hex, begins with prefix (1 to 64 hex digits), in ascending order.
// Expired records not swept yet are included.
//
// It compares the digests of every shard, one shard locked at a time, and
// copies no record: what an operator's lookup by the digest prefix shown in
// log lines uses ('idem keys', the /ops API).
func (s *Store) DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error) {
	lo, hi, ok := digestPrefixRange(prefix)
	if !ok {
		return nil, configError("prefix", "want 1 to 64 hex digits")
	}
	if limit <= 0 {
		return nil, configError("limit", "must be positive")
	}
	var out []idem.Digest
	for i := range s.shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		for d := range sh.records {
			if bytes.Compare(d[:], lo[:]) >= 0 && bytes.Compare(d[:], hi[:]) <= 0 {
				out = append(out, d)
			}
		}
		sh.mu.Unlock()
		if len(out) > limit {
			slices.SortFunc(out, func(a, b idem.Digest) int { return bytes.Compare(a[:], b[:]) })
			out = out[:limit]
		}
	}
	slices.SortFunc(out, func(a, b idem.Digest) int { return bytes.Compare(a[:], b[:]) })
	return out, nil
}

// digestPrefixRange returns the smallest and the largest digest whose hex
// form begins with prefix (lower or upper case), and whether prefix is 1 to
// 64 hex digits.
func digestPrefixRange(prefix string) (lo, hi idem.Digest, ok bool) {
	if len(prefix) == 0 || len(prefix) > 2*len(lo) {
		return lo, hi, false
	}
	if _, err := hex.Decode(lo[:], []byte(prefix+strings.Repeat("0", 2*len(lo)-len(prefix)))); err != nil {
		return lo, hi, false
	}
	if _, err := hex.Decode(hi[:], []byte(prefix+strings.Repeat("f", 2*len(hi)-len(prefix)))); err != nil {
		return lo, hi, false
	}
	return lo, hi, true
}
