package redisclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Client is what the Redis-backed packages need from a Redis client: run
// their Lua scripts and a few plain commands. It is implemented for go-redis
// (GoRedis) and for rueidis (Rueidis); the packages never see either client.
//
// Every method honours ctx: it returns when ctx is done, with an error that
// wraps ctx.Err() or the client's own timeout error. A nil reply (a script
// returning false, GET of a missing key) is ErrNil in both.
type Client interface {
	// Eval runs s with keys and args: EVALSHA, and EVAL when the server does
	// not know the script yet (NOSCRIPT). In a cluster, keys must share a
	// slot (a hash tag); the call is routed by the first key, and
	// MOVED/ASK redirections are followed by the client.
	Eval(ctx context.Context, s *Script, keys []string, args ...string) Reply

	// EvalMany runs s once per call, pipelined (one round trip per node),
	// and returns one reply per call, in order.
	EvalMany(ctx context.Context, s *Script, calls []Call) []Reply

	// Do sends one plain command: name, then keys, then args, e.g.
	// Do(ctx, "DEL", []string{k}) or Do(ctx, "CONFIG", nil, "GET", "maxmemory-policy").
	// In a cluster it is routed by the first key (keys must share a slot);
	// a command without keys goes to any node (use ForEachMaster for
	// per-node commands such as SCAN and INFO).
	Do(ctx context.Context, name string, keys []string, args ...string) Reply

	// EvalWait runs s as Eval does and sends WAIT right behind it, on the
	// same connection and in the same write, so that the WAIT covers the
	// script's writes and costs no extra round trip. It returns the
	// script's reply and WAIT's (the number of replicas that acknowledged
	// the connection's writes). In a cluster both go to the master of the
	// slot of keys[0], on a connection of their own; a MOVED reply (a stale
	// slot map) refreshes the map and sends both again, an ASK reply (a
	// slot being migrated) is returned as it is. The script runs at most
	// once per send, as with Eval.
	EvalWait(ctx context.Context, s *Script, w Wait, keys []string, args ...string) (reply, acked Reply)

	// ForEachMaster calls fn once per node that holds data: every master of
	// a cluster, the one server otherwise. fn gets a Client bound to that
	// node; calls run one after the other and the first error stops them.
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, node Client) error) error
}

// Call is one execution of a script in EvalMany.
type Call struct {
	Keys []string
	Args []string
}

// ErrNil is the error of a nil reply, for both clients.
var ErrNil = errors.New("redis: nil reply")

// Script is a Lua script the packages run through Client.Eval. Create it
// once (a package variable) with NewScript.
type Script struct {
	src string
	sha string
	gr  *redis.Script
}

// NewScript returns the script of Lua source src.
func NewScript(src string) *Script {
	gr := redis.NewScript(src)
	return &Script{src: src, sha: gr.Hash(), gr: gr}
}

// Hash is the script's SHA-1 digest (the EVALSHA argument).
func (s *Script) Hash() string { return s.sha }

// Source is the script's Lua source.
func (s *Script) Source() string { return s.src }

// Reply is the typed result of a command: an int64, a string, a []any of
// such values (nil for a nil element), a map[string]any (RESP3 maps, e.g.
// CONFIG GET), or an error. Both clients decode to these same shapes.
type Reply struct {
	val any
	err error
}

// Err is the command's error: ErrNil for a nil reply, a *ServerError for
// an error reply from Redis, else the client's transport or context error.
func (r Reply) Err() error { return r.err }

// Value returns the decoded reply.
func (r Reply) Value() (any, error) { return r.val, r.err }

// Int64 returns an integer reply.
func (r Reply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	switch v := r.val.(type) {
	case int64:
		return v, nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redisclient: reply %q is not an integer", v)
		}
		return n, nil
	}
	return 0, fmt.Errorf("redisclient: reply %T is not an integer", r.val)
}

// Text returns a string reply.
func (r Reply) Text() (string, error) {
	if r.err != nil {
		return "", r.err
	}
	switch v := r.val.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	}
	return "", fmt.Errorf("redisclient: reply %T is not a string", r.val)
}

// Slice returns an array reply.
func (r Reply) Slice() ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	if v, ok := r.val.([]any); ok {
		return v, nil
	}
	return nil, fmt.Errorf("redisclient: reply %T is not an array", r.val)
}

// Map returns a map reply (RESP3; CONFIG GET, HGETALL). A flat array of
// field, value pairs (RESP2) is accepted too.
func (r Reply) Map() (map[string]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	switch v := r.val.(type) {
	case map[string]any:
		return v, nil
	case []any:
		if len(v)%2 == 0 {
			m := make(map[string]any, len(v)/2)
			for i := 0; i < len(v); i += 2 {
				k, ok := v[i].(string)
				if !ok {
					return nil, fmt.Errorf("redisclient: map key %d is a %T", i/2, v[i])
				}
				m[k] = v[i+1]
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("redisclient: reply %T is not a map", r.val)
}

// Int64s returns an array reply of integers.
func (r Reply) Int64s() ([]int64, error) {
	a, err := r.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(a))
	for i, v := range a {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("redisclient: array element %d is a %T, not an integer", i, v)
		}
		out[i] = n
	}
	return out, nil
}

// Strings returns an array reply of strings (a nil element becomes "").
func (r Reply) Strings() ([]string, error) {
	a, err := r.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(a))
	for i, v := range a {
		switch v := v.(type) {
		case string:
			out[i] = v
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case nil:
		default:
			return nil, fmt.Errorf("redisclient: array element %d is a %T, not a string", i, v)
		}
	}
	return out, nil
}

// ServerError is an error reply from Redis (WRONGTYPE, ERR …, BUSY …), the
// same for both clients. Transport and context errors are not ServerErrors.
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return e.Msg }

// IsServerError reports whether err is (or wraps) an error reply from Redis.
func IsServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se)
}

// IsUnavailableReply reports whether err is an error reply that says the
// server cannot serve the command now, rather than that the command is
// wrong: BUSY (a script runs too long), READONLY (a replica, or a primary
// demoted by a failover), LOADING (a restart still reading its data),
// MASTERDOWN, CLUSTERDOWN and TRYAGAIN. Callers classify these as an
// unreachable backend, like transport errors, never as an answer.
func IsUnavailableReply(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, p := range [...]string{"BUSY ", "READONLY ", "LOADING ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN "} {
		if strings.HasPrefix(se.Msg+" ", p) {
			return true
		}
	}
	return false
}

// ErrorReply returns a Reply carrying err, for tests and adapters.
func ErrorReply(err error) Reply { return Reply{err: err} }
