package sqlstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
)

var _ idem.Resolver = (*Store)(nil)

// resolveQuery is Resolve's conditional UPDATE. Canonical arguments: $1
// key, $2 fence, and for a result $3 the result. It matches only the held
// record of that fence that has not expired by the store's clock, and
// clears its held mark.
func (s *Store) resolveQuery(release bool) query {
	d := s.cfg.Dialect
	f := map[Dialect]string{Postgres: "false", MySQL: "0", SQLite: "0"}[d]
	set := "result = $3, held = " + f + ", lease_until = 0"
	if release {
		set = "state = 3, result = NULL, held = " + f + ", lease_until = 0, started = " + f
	}
	if d == MySQL {
		set += ", rev = rev + 1"
	}
	if d == Postgres {
		// Pinned like the Store's other writes (see pinExpr).
		return build(d, s.cfg.Table, `WITH p AS (SELECT `+pinExpr(s.cfg.SynchronousCommit)+` AS pin)
UPDATE {{table}} SET `+set+`
FROM p WHERE key_hash = $1 AND fence = $2 AND state = 2 AND held AND expires_at > {{now}}`)
	}
	return build(d, s.cfg.Table, `UPDATE {{table}} SET `+set+`
WHERE key_hash = $1 AND fence = $2 AND state = 2 AND held = 1 AND expires_at > {{now}}`)
}

// Resolve implements idem.Resolver: one conditional UPDATE that compares
// the fence, the state, the expiry and the held mark, and counts the
// rows it changed. When it changed none, a read tells a resend of a
// resolution that already ran (success) from a record that is not held.
func (s *Store) Resolve(ctx context.Context, r idem.Resolution) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if !r.Release && len(r.Result) > s.MaxResult() {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(r.Result), s.MaxResult())
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	args := []any{r.Digest[:], int64(r.Fence)}
	if !r.Release {
		result := r.Result
		if result == nil {
			result = []byte{}
		}
		args = append(args, result)
	}
	q := s.resolveQuery(r.Release)
	res, err := s.db.ExecContext(ctx, q.sql, q.args(args...)...)
	for attempt := 1; err != nil && attempt < maxAttempts && s.lostRace(ctx, err); attempt++ {
		res, err = s.db.ExecContext(ctx, q.sql, q.args(args...)...)
	}
	if err != nil {
		if packetTooLarge(err) {
			return fmt.Errorf("%w: the server refused the statement as larger than its max_allowed_packet: %w", idem.ErrResultTooLarge, err)
		}
		return fail(ctx, "resolve", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fail(ctx, "resolve", err)
	}
	if n > 0 {
		return nil
	}
	rec, err := s.Lookup(ctx, r.Digest)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return idem.ErrNotFound
	case err != nil:
		return err
	case rec.Fence != r.Fence:
		return idem.ErrNotHeld
	case r.Release && rec.State == idem.StateReleased,
		!r.Release && rec.State == idem.StateCompleted && bytes.Equal(rec.Result, r.Result):
		return nil // sent again: already resolved this way
	}
	return idem.ErrNotHeld
}
