package tiered

import (
	"context"
	"errors"

	"github.com/idemkit/idem"
)

var _ idem.Resolver = (*Store)(nil)

// digestForgetter is implemented by fast stores that can delete a record
// by its digest (redisstore.Store does).
type digestForgetter interface {
	ForgetDigest(ctx context.Context, d idem.Digest) error
}

var errNoForgetDigest = errors.New("tiered: the fast store cannot delete a record by digest")

func (s *Store) forgetDigest(ctx context.Context, d idem.Digest) error {
	f, ok := s.fast.(digestForgetter)
	if !ok {
		return errNoForgetDigest
	}
	return f.ForgetDigest(ctx, d)
}

// Lookup implements idem.Resolver: the durable record is the record.
func (s *Store) Lookup(ctx context.Context, d idem.Digest) (idem.Record, error) {
	return idem.Lookup(ctx, s.durable, d)
}

// Resolve implements idem.Resolver: the durable store resolves, then the
// fast record of the key is deleted, so that no copy of the held answer
// outlives it. This release never copies a held record into the fast
// store (see Store.Hold); the delete is for copies made by earlier ones. A
// fast store that fails or is being skipped gets the delete queued, as
// every other correction (the next calls make it once Redis answers).
func (s *Store) Resolve(ctx context.Context, r idem.Resolution) error {
	if err := idem.Resolve(ctx, s.durable, r); err != nil {
		return err
	}
	if _, ok := s.fast.(digestForgetter); !ok || s.mirror == nil {
		return nil
	}
	if s.bypassed() {
		s.queueRepairDigest(r.Digest, idem.Key{})
		return nil
	}
	fctx, cancel := s.fastCtx(ctx, 0)
	defer cancel()
	if err := s.forgetDigest(fctx, r.Digest); err != nil {
		s.fastFailed("forget", err)
		s.queueRepairDigest(r.Digest, idem.Key{})
	}
	return nil
}

// lister is what List needs of the durable store.
type lister interface {
	List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
}

// List lists the durable store's records (see sqlstore.Store.List), for
// 'idem keys list'; it fails when the durable store cannot list.
func (s *Store) List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error) {
	l, ok := s.durable.(lister)
	if !ok {
		return nil, errors.New("tiered: the durable store cannot list its records")
	}
	return l.List(ctx, state, startedOnly, limit)
}
