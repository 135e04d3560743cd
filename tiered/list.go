package tiered

import (
	"context"
	"errors"

	"github.com/idemkit/idem"
)

// DigestsWithPrefix returns the durable store's digests that begin with
// prefix (see sqlstore.Store.DigestsWithPrefix), for the operators' lookup
// by a digest prefix; it fails when the durable store cannot look one up.
func (s *Store) DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error) {
	l, ok := s.durable.(interface {
		DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error)
	})
	if !ok {
		return nil, errors.New("tiered: the durable store cannot look up a digest prefix")
	}
	return l.DigestsWithPrefix(ctx, prefix, limit)
}
