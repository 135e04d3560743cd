package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/heldmark"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

var (
	//go:embed lua/resolve.lua
	resolveSrc string
	//go:embed lua/listread.lua
	listReadSrc string

	resolveScript  = redisclient.NewScript(resolveSrc)
	listReadScript = redisclient.NewScript(listReadSrc)
)

var _ idem.Resolver = (*Store)(nil)

// Lookup implements idem.Resolver: Get by digest, one HMGET.
func (s *Store) Lookup(ctx context.Context, d idem.Digest) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	vals, err := s.c.Do(ctx, "HMGET", []string{s.redisKey(d)}, recordFields...).Slice()
	if err == nil && len(vals) != len(recordFields) {
		err = fmt.Errorf("redisstore: HMGET answered %d fields, want %d", len(vals), len(recordFields))
	}
	if err != nil {
		return idem.Record{}, s.fail(ctx, "get", err)
	}
	if vals[0] == nil {
		return idem.Record{}, idem.ErrNotFound
	}
	rec, err := decodeRecord(d, vals)
	if err != nil {
		return idem.Record{}, s.fail(ctx, "get", err)
	}
	return rec, nil
}

// Resolve implements idem.Resolver with one script (lua/resolve.lua) that
// compares the fence, the state, the expiry and the held mark and
// writes in the same step. A resend after a lost reply (go-redis resends
// by itself; the store on rueidis does, see NewRueidis) finds the record
// already resolved this way and succeeds again.
func (s *Store) Resolve(ctx context.Context, r idem.Resolution) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if !r.Release && heldmark.Legacy(r.Result) {
		// It would read as held again (a record of an earlier release).
		return configError("Resolution.Result", "is an outcome-unknown answer; resolve with the real result, or release")
	}
	if !r.Release && len(r.Result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(r.Result), s.cfg.MaxResult)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	mode, result := "c", string(r.Result)
	if r.Release {
		mode, result = "r", ""
	}
	w := s.eval(ctx, resolveScript, []string{s.redisKey(r.Digest)},
		strconv.FormatUint(r.Fence, 10), mode, heldmark.Exact, heldmark.HTTPPrefix, result)
	n, err := w.reply.Int64()
	if err != nil {
		return s.fail(ctx, "resolve", err)
	}
	switch n {
	case 1:
		return s.replicated(ctx, "resolve", w)
	case 0:
		return idem.ErrNotFound
	}
	return idem.ErrNotHeld
}

// ForgetDigest is Forget by digest (tiered's Resolve deletes the fast copy
// of a record it only knows by digest).
func (s *Store) ForgetDigest(ctx context.Context, d idem.Digest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.fail(ctx, "forget", s.c.Do(ctx, "DEL", []string{s.redisKey(d)}).Err())
}
