package redisstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/heldmark"
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
	args := append([]string{heldmark.Exact, heldmark.HTTPPrefix}, fields...)
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

// DigestsWithPrefix returns the digests of up to limit records whose digest,
// in hex, begins with prefix (1 to 64 hex digits), in ascending order; when
// more than limit match, which limit of them is unspecified.
//
// It SCANs for the keys matching Prefix+prefix* on every master and reads
// no record: the server walks its keyspace (in steps, other clients are
// served between them) but only matching key names travel, and the walk
// stops once more than limit keys are found. It is what an operator's
// lookup by the digest prefix shown in log lines uses ('idem keys', the
// /ops API).
func (s *Store) DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error) {
	if len(prefix) == 0 || len(prefix) > 64 || strings.Trim(strings.ToLower(prefix), "0123456789abcdef") != "" {
		return nil, configError("prefix", "want 1 to 64 hex digits")
	}
	if limit <= 0 {
		return nil, configError("limit", "must be positive")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	match := escapeGlob(s.cfg.Prefix) + strings.ToLower(prefix) + "*"
	var out []idem.Digest
	errEnough := errors.New("enough")
	err := s.c.ForEachMaster(ctx, func(ctx context.Context, node redisclient.Client) error {
		cursor := "0"
		for {
			a, err := node.Do(ctx, "SCAN", nil, cursor, "MATCH", match, "COUNT", strconv.Itoa(scanCount)).Slice()
			if err != nil {
				return err
			}
			if len(a) != 2 {
				return fmt.Errorf("redisstore: SCAN answered %d elements, want 2", len(a))
			}
			next, ok := a[0].(string)
			if !ok {
				return fmt.Errorf("redisstore: SCAN cursor is a %T", a[0])
			}
			elems, _ := a[1].([]any)
			for _, e := range elems {
				k, _ := e.(string)
				var d idem.Digest
				h := strings.TrimPrefix(k, s.cfg.Prefix)
				if len(h) != hex.EncodedLen(len(d)) {
					continue // not a record key (another user of the prefix)
				}
				if _, err := hex.Decode(d[:], []byte(h)); err != nil {
					continue
				}
				if !slices.Contains(out, d) { // SCAN may return a key twice
					out = append(out, d)
				}
			}
			if len(out) > limit {
				return errEnough
			}
			if cursor = next; cursor == "0" {
				return nil
			}
		}
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, s.fail(ctx, "list", err)
	}
	slices.SortFunc(out, func(a, b idem.Digest) int { return bytes.Compare(a[:], b[:]) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
