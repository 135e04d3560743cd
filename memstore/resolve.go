package memstore

import (
	"bytes"
	"context"
	"fmt"
	"time"

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
	e := sh.records[r.Digest]
	switch {
	case e == nil:
		return idem.ErrNotFound
	case e.fence != r.Fence || !e.expires.After(time.Now()):
		return idem.ErrNotHeld
	case idem.HeldState(e.state, e.result) == idem.StateHeld:
		if r.Release {
			e.state = idem.StateReleased
			e.result = nil
			e.started = false
		} else {
			e.result = clone(r.Result)
		}
		e.leaseUntil = time.Time{}
		return nil
	case r.Release && e.state == idem.StateReleased,
		!r.Release && e.state == idem.StateCompleted && bytes.Equal(e.result, r.Result):
		return nil // sent again: already resolved this way
	}
	return idem.ErrNotHeld
}
