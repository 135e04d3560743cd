package redisstore

import (
	"context"
	"errors"

	"github.com/idemkit/idem"
)

// PENDING (lead's placeholder so that main builds while the redisstores
// branch implements Store.MarkStarted in Lua): delete this file when the real
// method lands in redisstore.go.
func (s *Store) MarkStarted(ctx context.Context, owner idem.Owner) error {
	return idem.Unavailable("mark started", errors.New("redisstore: MarkStarted is not implemented yet"))
}
