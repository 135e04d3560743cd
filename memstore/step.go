package memstore

import (
	"bytes"
	"context"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/step"
)

var _ step.Store = (*Store)(nil)

// stepPoint is a recovery point. It belongs to the operation of the
// record whose claim was acquired before expires: the record's expiry
// when the point was saved or last loaded. A record acquired afresh
// after that (the old one expired) has a later creation time and does
// not see it.
type stepPoint struct {
	result  []byte
	expires int64
}

// SaveStep implements step.Store, under the record's shard lock.
func (s *Store) SaveStep(ctx context.Context, owner idem.Owner, name string, result []byte) error {
	if err := step.CheckName(name); err != nil {
		return err
	}
	return s.owned(ctx, owner, func(sh *shard, e entry, now int64) (entry, error) {
		if e.state != idem.StateInProgress || e.fence != owner.Fence {
			return e, idem.ErrLeaseLost
		}
		d := owner.Key.Digest()
		points := sh.steps[d]
		if p, ok := points[name]; ok && p.expires > e.created {
			return e, nil // saved in this operation: the first result stays
		}
		if points == nil {
			if sh.steps == nil {
				sh.steps = make(map[idem.Digest]map[string]stepPoint)
			}
			points = make(map[string]stepPoint)
			sh.steps[d] = points
		}
		points[name] = stepPoint{result: bytes.Clone(result), expires: e.expires}
		return e, nil
	})
}

// Steps implements step.Store: the points of the record's operation,
// whose expiry it moves to the record's.
func (s *Store) Steps(ctx context.Context, owner idem.Owner) (map[string][]byte, error) {
	out := make(map[string][]byte)
	err := s.owned(ctx, owner, func(sh *shard, e entry, now int64) (entry, error) {
		if e.state != idem.StateInProgress || e.fence != owner.Fence {
			return e, idem.ErrLeaseLost
		}
		points := sh.steps[owner.Key.Digest()]
		for name, p := range points {
			if p.expires <= e.created {
				delete(points, name) // an earlier operation's
				continue
			}
			p.expires = e.expires
			points[name] = p
			out[name] = bytes.Clone(p.result)
		}
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
