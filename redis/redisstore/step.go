package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/step"
)

var _ step.Store = (*Store)(nil)

var (
	//go:embed lua/stepowner.lua
	stepOwnerSrc string
	//go:embed lua/savestep.lua
	saveStepSrc string
	//go:embed lua/loadsteps.lua
	loadStepsSrc string

	saveStepScript  = redisclient.NewScript(stepOwnerSrc + saveStepSrc)
	loadStepsScript = redisclient.NewScript(stepOwnerSrc + loadStepsSrc)
)

// stepsKey is the Redis key of the recovery points of the record at
// record: a hash in the record's slot, so that one script reads both in
// a cluster. A record key without a hash tag is hashed whole, so
// "{record}:steps" hashes the same; a key whose prefix carries a tag
// keeps it.
func stepsKey(record string) string {
	if i := strings.IndexByte(record, '{'); i >= 0 {
		if j := strings.IndexByte(record[i+1:], '}'); j > 0 {
			return record + ":steps"
		}
	}
	return "{" + record + "}:steps"
}

// stepKeys are the two keys of owner's step scripts, and their owner
// arguments, or false for an owner that holds nothing.
func (s *Store) stepKeys(owner idem.Owner) ([]string, []string, bool) {
	if owner.Key.IsZero() || owner.Token == (idem.Token{}) {
		return nil, nil, false
	}
	k := s.redisKey(owner.Key.Digest())
	return []string{k, stepsKey(k)}, []string{string(owner.Token[:]), strconv.FormatUint(owner.Fence, 10)}, true
}

// SaveStep implements step.Store: one script that compares the owner's
// token and fence and writes the point, next to the record (its own key
// in the record's slot, which expires with it).
func (s *Store) SaveStep(ctx context.Context, owner idem.Owner, name string, result []byte) error {
	if err := step.CheckName(name); err != nil {
		return err
	}
	if len(result) > s.cfg.MaxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", idem.ErrResultTooLarge, len(result), s.cfg.MaxResult)
	}
	keys, args, ok := s.stepKeys(owner)
	if !ok {
		return idem.ErrLeaseLost
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w := s.eval(ctx, saveStepScript, keys, append(args, name, string(result))...)
	n, err := w.reply.Int64()
	if err != nil {
		return s.fail(ctx, "save step", err)
	}
	if n != 1 {
		return idem.ErrLeaseLost
	}
	return s.replicated(ctx, "save step", w)
}

// Steps implements step.Store: one script.
func (s *Store) Steps(ctx context.Context, owner idem.Owner) (map[string][]byte, error) {
	keys, args, ok := s.stepKeys(owner)
	if !ok {
		return nil, idem.ErrLeaseLost
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := s.eval(ctx, loadStepsScript, keys, args...)
	v, err := w.reply.Value()
	if err != nil {
		return nil, s.fail(ctx, "load steps", err)
	}
	if _, lost := v.(int64); lost {
		return nil, idem.ErrLeaseLost
	}
	a, err := w.reply.Strings()
	if err != nil || len(a)%2 != 0 {
		return nil, s.fail(ctx, "load steps", fmt.Errorf("redisstore: unexpected reply %v", v))
	}
	out := make(map[string][]byte, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		out[a[i]] = []byte(a[i+1])
	}
	if err := s.replicated(ctx, "load steps", w); err != nil {
		return nil, err
	}
	return out, nil
}
