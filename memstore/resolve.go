package memstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/idemkit/idem"
)

var _ idem.Resolver = (*Store)(nil)

// Resolve implements idem.Resolver, under the record's shard lock.
func (s *Store) Resolve(ctx context.Context, r idem.Resolution) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if !r.Release && len(r.Result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(r.Result), s.cfg.MaxResult)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := s.shard(r.Digest)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.records[r.Digest]
	switch {
	case !ok:
		return idem.ErrNotFound
	case e.fence != r.Fence || e.expires <= s.now():
		return idem.ErrNotHeld
	case e.state == idem.StateHeld:
		// The held answer's bytes stay as they are for whoever holds
		// them (a replay in progress); the record gets new ones.
		sh.results.free(e.result)
		if r.Release {
			e.state = idem.StateReleased
			e.result = resultRef{}
			e.started = false
		} else {
			e.state = idem.StateCompleted
			e.result = sh.results.add(r.Result)
		}
		e.leaseUntil = 0
		sh.records[r.Digest] = e
		sh.results.compact(sh.records)
		return nil
	case r.Release && e.state == idem.StateReleased,
		!r.Release && e.state == idem.StateCompleted && bytes.Equal(sh.results.bytes(e.result), r.Result):
		return nil // sent again: already resolved this way
	}
	return idem.ErrNotHeld
}
