package redisstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

// List returns up to limit records, newest first (by CreatedAt): those in
// state (StateHeld: the held ones; StateCompleted: the others), or in
// any state when state is 0, and, when startedOnly is set,
// only those with the Started mark. Results are not returned
// (Record.Result is nil); Get a record for its result.
//
// List is for operators ('idem keys list'). Like Purge it SCANs the keys
// under Prefix on every master, which walks the whole database, and reads
// the records in pipelined batches (without their results): on a shared
// server with millions of keys, run it rarely. Records are read one by one,
// so the list is no snapshot: a record may change while List runs.
func (s *Store) List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error) {
	if limit <= 0 {
		return nil, configError("limit", "must be positive")
	}
	if state != 0 && state.String() == "invalid" {
		return nil, configError("state", fmt.Sprintf("unknown state %d", state))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The record's fields without its result: "res" is replaced by a field
	// name no record has, so that decodeRecord's positions still hold.
	fields := slices.Clone(recordFields)
	if i := slices.Index(fields, "res"); i >= 0 {
		fields[i] = "\x00"
	}
	var out []idem.Record
	keep := func(recs []idem.Record) {
		out = append(out, recs...) // ForEachMaster visits the nodes one at a time
		if len(out) > limit {
			sortNewestFirst(out)
			out = out[:limit]
		}
	}
	err := s.c.ForEachMaster(ctx, func(ctx context.Context, node redisclient.Client) error {
		return s.listNode(ctx, node, fields, state, startedOnly, keep)
	})
	if err != nil {
		return nil, s.fail(ctx, "list", err)
	}
	sortNewestFirst(out)
	return out, nil
}

// listBatch is how many records one pipeline reads.
const listBatch = 500

func (s *Store) listNode(ctx context.Context, node redisclient.Client, fields []string, state idem.State, startedOnly bool, keep func([]idem.Record)) error {
	exact, prefix := idem.HeldMarkers()
	args := append([]string{exact, prefix}, fields...)
	return s.scan(ctx, node, scanCount, listBatch, func(chunk []string) error {
		calls := make([]redisclient.Call, len(chunk))
		for i, k := range chunk {
			calls[i] = redisclient.Call{Keys: []string{k}, Args: args}
		}
		var recs []idem.Record
		for i, r := range node.EvalMany(ctx, listReadScript, calls) {
			vals, err := r.Slice()
			if err != nil {
				return err
			}
			if len(vals) != len(fields)+1 || vals[0] == nil {
				continue // expired or deleted since the SCAN
			}
			held, _ := vals[len(fields)].(int64)
			vals = vals[:len(fields)]
			var d idem.Digest
			h := strings.TrimPrefix(chunk[i], s.cfg.Prefix)
			if len(h) != hex.EncodedLen(len(d)) {
				continue // not a record key (another user of the prefix)
			}
			if _, err := hex.Decode(d[:], []byte(h)); err != nil {
				continue
			}
			rec, err := decodeRecord(d, vals)
			if err != nil {
				return err
			}
			rec.Result = nil
			if held == 1 {
				rec.State = idem.StateHeld
			}
			if i := slices.Index(fields, "m"); i >= 0 {
				if m, _ := vals[i].(string); m == "1" {
					rec.Started = true
				}
			}
			if (state == 0 || rec.State == state) && (!startedOnly || rec.Started) {
				recs = append(recs, rec)
			}
		}
		keep(recs)
		return nil
	})
}

func sortNewestFirst(recs []idem.Record) {
	slices.SortFunc(recs, func(a, b idem.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return slices.Compare(a.Digest[:], b.Digest[:])
	})
}
