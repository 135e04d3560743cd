package redisclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// GoRedis adapts a go-redis client (*redis.Client, *redis.ClusterClient,
// *redis.Ring, a failover client, or a type embedding one). go-redis follows
// MOVED/ASK itself. It honours context deadlines only when the client was
// created with ContextTimeoutEnabled; without it a call to an unreachable
// Redis waits for the client's own timeouts and retries, whatever ctx says
// (the packages that promise a deadline refuse such a client).
func GoRedis(rdb redis.UniversalClient) Client { return goRedis{rdb} }

type goRedis struct{ rdb redis.UniversalClient }

// evalArgs builds "evalsha", digest, numkeys, keys…, args… in one slice,
// without the per-call copying of redis.Script.Run.
func evalArgs(verb, script string, keys, args []string) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, verb, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	return a
}

func newEvalCmd(ctx context.Context, verb, script string, keys, args []string) *redis.Cmd {
	cmd := redis.NewCmd(ctx, evalArgs(verb, script, keys, args)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // cluster clients route by the first key
	}
	return cmd
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

func (c goRedis) Eval(ctx context.Context, s *Script, keys []string, args ...string) Reply {
	cmd := newEvalCmd(ctx, "evalsha", s.sha, keys, args)
	_ = c.rdb.Process(ctx, cmd)
	if isNoScript(cmd.Err()) {
		cmd = newEvalCmd(ctx, "eval", s.src, keys, args)
		_ = c.rdb.Process(ctx, cmd)
	}
	return goRedisReply(cmd)
}

func (c goRedis) EvalMany(ctx context.Context, s *Script, calls []Call) []Reply {
	cmds := make([]*redis.Cmd, len(calls))
	run := func(verb, script string, only func(i int) bool) {
		p := c.rdb.Pipeline()
		for i, call := range calls {
			if only(i) {
				cmds[i] = newEvalCmd(ctx, verb, script, call.Keys, call.Args)
				_ = p.Process(ctx, cmds[i])
			}
		}
		_, _ = p.Exec(ctx) // errors are per command
	}
	run("evalsha", s.sha, func(int) bool { return true })
	var again bool
	for _, cmd := range cmds {
		again = again || isNoScript(cmd.Err())
	}
	if again {
		run("eval", s.src, func(i int) bool { return isNoScript(cmds[i].Err()) })
	}
	out := make([]Reply, len(cmds))
	for i, cmd := range cmds {
		out[i] = goRedisReply(cmd)
	}
	return out
}

func (c goRedis) Do(ctx context.Context, name string, keys []string, args ...string) Reply {
	a := make([]any, 0, 1+len(keys)+len(args))
	a = append(a, name)
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(1)
	}
	_ = c.rdb.Process(ctx, cmd)
	return goRedisReply(cmd)
}

func (c goRedis) ForEachMaster(ctx context.Context, fn func(context.Context, Client) error) error {
	// go-redis visits the nodes concurrently; the contract is one call at
	// a time, so fn needs no locking.
	var mu sync.Mutex
	one := func(ctx context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(ctx, goRedis{n})
	}
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		return rdb.ForEachMaster(ctx, one)
	case *redis.Ring:
		return rdb.ForEachShard(ctx, one)
	}
	return fn(ctx, c)
}

// goRedisReply maps a go-redis reply to a Reply: redis.Nil to ErrNil, an
// error reply to *ServerError, RESP3 maps and other types to the same
// shapes as rueidis.
func goRedisReply(cmd *redis.Cmd) Reply {
	v, err := cmd.Result()
	if err != nil {
		return Reply{err: goRedisErr(err)}
	}
	return Reply{val: normalize(v)}
}

func goRedisErr(err error) error {
	if errors.Is(err, redis.Nil) {
		return ErrNil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return &ServerError{Msg: re.Error()}
	}
	return err
}

// normalize turns go-redis reply values into int64, string, []any, or nil.
func normalize(v any) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = normalize(v[i])
		}
		return v
	case []byte:
		return string(v)
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case map[string]any:
		for k, e := range v {
			v[k] = normalize(e)
		}
		return v
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case redis.Error:
		return &ServerError{Msg: v.Error()}
	}
	return v
}

func (c goRedis) EvalWait(ctx context.Context, s *Script, w Wait, keys []string, args ...string) (Reply, Reply) {
	for moved := 0; ; moved++ {
		node, err := c.waitNode(ctx, keys)
		if err != nil {
			err = goRedisErr(err)
			return Reply{err: err}, Reply{err: err}
		}
		r, a := evalWaitOn(ctx, node, s, w, keys, args)
		cc, cluster := c.rdb.(*redis.ClusterClient)
		if !cluster || !isMoved(r) || moved == maxMoved {
			return r, a
		}
		cc.ReloadState(ctx) // asynchronous: give it a moment
		if !pause(ctx, time.Duration(moved+1)*20*time.Millisecond) {
			return r, a
		}
	}
}

// waitNode is the single-server client that EvalWait pipelines on: the
// client itself (single node, or sentinel's failover client, which is a
// *redis.Client bound to the current master), or in a cluster the master of
// keys[0]'s slot, which does not follow redirections (EvalWait does).
func (c goRedis) waitNode(ctx context.Context, keys []string) (*redis.Client, error) {
	switch rdb := c.rdb.(type) {
	case *redis.Client:
		return rdb, nil
	case *redis.ClusterClient:
		if len(keys) == 0 {
			return nil, errors.New("redisclient: EvalWait in a cluster needs a key")
		}
		return rdb.MasterForKey(ctx, keys[0])
	}
	return nil, ErrWaitUnsupported
}

// evalWaitOn pipelines the script and WAIT on one connection of rdb: a
// go-redis pipeline on a *redis.Client writes its commands in one write
// and reads the replies from the same connection (and, when it resends
// after a transport error, resends both).
func evalWaitOn(ctx context.Context, rdb *redis.Client, s *Script, w Wait, keys, args []string) (Reply, Reply) {
	n, ms := w.args()
	run := func(verb, script string) (*redis.Cmd, *redis.Cmd) {
		p := rdb.Pipeline()
		cmd := newEvalCmd(ctx, verb, script, keys, args)
		wait := redis.NewCmd(ctx, "wait", n, ms)
		_ = p.Process(ctx, cmd)
		_ = p.Process(ctx, wait)
		_, _ = p.Exec(ctx) // errors are per command
		return cmd, wait
	}
	cmd, wait := run("evalsha", s.sha)
	if isNoScript(cmd.Err()) {
		cmd, wait = run("eval", s.src)
	}
	return goRedisReply(cmd), goRedisReply(wait)
}

// pause waits d, or until ctx ends (then it reports false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
