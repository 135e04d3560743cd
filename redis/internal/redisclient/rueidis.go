package redisclient

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Rueidis adapts a rueidis client (single node, sentinel or cluster, as
// rueidis.NewClient chose from its options). Commands from concurrent
// callers share connections through automatic pipelining, rueidis's
// default. rueidis honours ctx natively: a call returns when ctx is done,
// with ctx's error, even if the connection is stalled. It follows MOVED and
// ASK itself. Script calls are never retried by rueidis (they are not
// marked retryable), so a script runs at most once per Eval, plus one EVAL
// after a NOSCRIPT.
func Rueidis(c rueidis.Client) Client { return ruClient{c} }

type ruClient struct{ c rueidis.Client }

func (c ruClient) evalCmd(verb, script string, keys, args []string) rueidis.Completed {
	b := c.c.B()
	if verb == "evalsha" {
		return b.Evalsha().Sha1(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return b.Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

func ruNoScript(r rueidis.RedisResult) bool {
	e, ok := rueidis.IsRedisErr(r.Error())
	return ok && e.IsNoScript()
}

func (c ruClient) Eval(ctx context.Context, s *Script, keys []string, args ...string) Reply {
	r := c.c.Do(ctx, c.evalCmd("evalsha", s.sha, keys, args))
	if ruNoScript(r) {
		r = c.c.Do(ctx, c.evalCmd("eval", s.src, keys, args))
	}
	return ruReply(r)
}

func (c ruClient) EvalMany(ctx context.Context, s *Script, calls []Call) []Reply {
	if len(calls) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, call := range calls {
		cmds[i] = c.evalCmd("evalsha", s.sha, call.Keys, call.Args)
	}
	res := c.c.DoMulti(ctx, cmds...)
	var idx []int
	var again rueidis.Commands
	for i, r := range res {
		if ruNoScript(r) {
			idx = append(idx, i)
			again = append(again, c.evalCmd("eval", s.src, calls[i].Keys, calls[i].Args))
		}
	}
	if len(again) > 0 {
		for j, r := range c.c.DoMulti(ctx, again...) {
			res[idx[j]] = r
		}
	}
	out := make([]Reply, len(res))
	for i, r := range res {
		out[i] = ruReply(r)
	}
	return out
}

func (c ruClient) Do(ctx context.Context, name string, keys []string, args ...string) Reply {
	cmd := c.c.B().Arbitrary(name)
	if len(keys) > 0 {
		return ruReply(c.c.Do(ctx, cmd.Keys(keys...).Args(args...).Build()))
	}
	return ruReply(c.c.Do(ctx, cmd.Args(args...).Build()))
}

func (c ruClient) ForEachMaster(ctx context.Context, fn func(context.Context, Client) error) error {
	nodes := c.c.Nodes()
	if len(nodes) <= 1 {
		return fn(ctx, c)
	}
	for _, n := range nodes {
		// A cluster client connects to replicas only when told to read
		// from them; skip those so each key is visited on one node.
		role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
		if err != nil {
			return ruErr(err)
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r != "master" {
				continue
			}
		}
		if err := fn(ctx, ruClient{n}); err != nil {
			return err
		}
	}
	return nil
}

func ruReply(r rueidis.RedisResult) Reply {
	v, err := r.ToAny()
	if err != nil {
		return Reply{err: ruErr(err)}
	}
	return Reply{val: ruNormalize(v)}
}

func ruErr(err error) error {
	if rueidis.IsRedisNil(err) {
		return ErrNil
	}
	if e, ok := rueidis.IsRedisErr(err); ok {
		return &ServerError{Msg: e.Error()}
	}
	return err
}

func ruNormalize(v any) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = ruNormalize(v[i])
		}
		return v
	case map[string]any:
		for k, e := range v {
			v[k] = ruNormalize(e)
		}
		return v
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case error:
		return ruErr(v)
	}
	return v
}

func (c ruClient) EvalWait(ctx context.Context, s *Script, w Wait, keys []string, args ...string) (Reply, Reply) {
	for moved := 0; ; moved++ {
		r, a := c.evalWaitOnce(ctx, s, w, keys, args)
		if !isMoved(r) || moved == maxMoved {
			return r, a
		}
		// The dedicated connection of a cluster does not follow MOVED;
		// rueidis refreshes its slot map in the background.
		if !pause(ctx, time.Duration(moved+1)*20*time.Millisecond) {
			return r, a
		}
	}
}

// evalWaitOnce sends the script and WAIT on a dedicated connection (in a
// cluster, to the master of the script's slot; WAIT has no key and goes
// with it). rueidis treats WAIT as a blocking command and never
// pipelines it with other callers' commands; on a dedicated connection
// DoMulti writes both commands at once and reads both replies from that
// connection.
func (c ruClient) evalWaitOnce(ctx context.Context, s *Script, w Wait, keys, args []string) (Reply, Reply) {
	n, ms := w.args()
	nr, _ := strconv.ParseInt(n, 10, 64)
	tm, _ := strconv.ParseInt(ms, 10, 64)
	dc, cancel := c.c.Dedicate()
	defer cancel()
	run := func(verb, script string) []rueidis.RedisResult {
		return dc.DoMulti(ctx, c.evalCmd(verb, script, keys, args), dc.B().Wait().Numreplicas(nr).Timeout(tm).Build())
	}
	res := run("evalsha", s.sha)
	if ruNoScript(res[0]) {
		res = run("eval", s.src)
	}
	for _, r := range res {
		if r.NonRedisError() != nil {
			dc.Close() // a WAIT cut short by ctx would still block the connection
			break
		}
	}
	return ruReply(res[0]), ruReply(res[1])
}
