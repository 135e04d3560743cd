package tiered

import (
	"context"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/step"
)

var _ step.Store = (*Store)(nil)

// errNoSteps is returned by SaveStep and Steps when the durable store
// keeps no recovery points.
var errNoSteps = &idem.ConfigError{Package: "tiered", Field: "durable", Reason: "the durable store does not implement step.Store"}

// SaveStep implements step.Store: recovery points live in the durable
// store alone, which decides every claim (the owner is its owner); the
// fast store only answers duplicates of completed keys.
func (s *Store) SaveStep(ctx context.Context, owner idem.Owner, name string, result []byte) error {
	d, ok := s.durable.(step.Store)
	if !ok {
		return errNoSteps
	}
	return d.SaveStep(ctx, owner, name, result)
}

// Steps implements step.Store, from the durable store.
func (s *Store) Steps(ctx context.Context, owner idem.Owner) (map[string][]byte, error) {
	d, ok := s.durable.(step.Store)
	if !ok {
		return nil, errNoSteps
	}
	return d.Steps(ctx, owner)
}
