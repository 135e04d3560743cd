package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
)

// List returns up to limit records, newest first (by CreatedAt): those in
// state, or in any state when state is 0, and, when startedOnly is set,
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
		return nil, errors.New("redisstore: List limit must be positive")
	}
	if state != 0 && state.String() == "invalid" {
		return nil, fmt.Errorf("redisstore: List of invalid state %d", state)
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
	var (
		mu  sync.Mutex // ForEachMaster runs the nodes concurrently
		out []idem.Record
	)
	keep := func(recs []idem.Record) {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, recs...)
		if len(out) > limit {
			sortNewestFirst(out)
			out = out[:limit]
		}
	}
	node := func(ctx context.Context, c redis.Cmdable) error {
		return s.listNode(ctx, c, fields, state, startedOnly, keep)
	}
	var err error
	switch c := s.c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return node(ctx, c) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return node(ctx, c) })
	default:
		err = node(ctx, s.c)
	}
	if err != nil {
		return nil, s.fail(ctx, "list", err)
	}
	sortNewestFirst(out)
	return out, nil
}

// listBatch is how many records one pipeline reads.
const listBatch = 500

func (s *Store) listNode(ctx context.Context, c redis.Cmdable, fields []string, state idem.State, startedOnly bool, keep func([]idem.Record)) error {
	var cursor uint64
	match := escapeGlob(s.cfg.Prefix) + "*"
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return err
		}
		for len(keys) > 0 {
			chunk := keys[:min(listBatch, len(keys))]
			keys = keys[len(chunk):]
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range chunk {
					p.HMGet(ctx, k, fields...)
				}
				return nil
			})
			if err != nil {
				return err
			}
			var recs []idem.Record
			for i, cmd := range cmds {
				vals, err := cmd.(*redis.SliceCmd).Result()
				if err != nil {
					return err
				}
				if vals[0] == nil {
					continue // expired or deleted since the SCAN
				}
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
		}
		cursor = next
		if cursor == 0 {
			return nil
		}
	}
}

func sortNewestFirst(recs []idem.Record) {
	slices.SortFunc(recs, func(a, b idem.Record) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return slices.Compare(a.Digest[:], b.Digest[:])
	})
}
