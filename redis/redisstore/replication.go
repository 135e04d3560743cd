package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

var _ idem.ReplicationReporter = (*Store)(nil)

// Replication implements idem.ReplicationReporter. It reads INFO
// replication (role, connected_slaves) and, where CONFIG is allowed,
// min-replicas-to-write, on every master the client writes to (each shard
// of a cluster, the current master of a sentinel set), and returns the
// weakest verdict:
//
//   - idem.ReplicationSynchronous when Config.WaitReplicas is set (Waits is
//     its value; Replicas the fewest connected to any master: fewer than
//     Waits means every write fails until they are back);
//   - idem.ReplicationAsynchronous when a master has replicas attached and
//     WaitReplicas is 0;
//   - idem.ReplicationSingle when no master has a replica and none is
//     waited for;
//   - idem.ReplicationUnknown when a node is not a master (the client
//     points at a replica) or does not reveal its role.
//
// Network failures are errors for which idem.IsUnavailable is true.
func (s *Store) Replication(ctx context.Context) (idem.Replication, error) {
	var (
		out     idem.Replication
		details []string
		first   = true
	)
	err := s.c.ForEachMaster(ctx, func(ctx context.Context, node redisclient.Client) error {
		r, err := s.nodeReplication(ctx, node)
		if err != nil {
			return err
		}
		details = append(details, r.Detail)
		if first || weaker(r.Mode, out.Mode) {
			out.Mode = r.Mode
		}
		if first || r.Replicas < out.Replicas {
			out.Replicas = r.Replicas
		}
		first = false
		return nil
	})
	if err != nil {
		return idem.Replication{}, s.fail(ctx, "replication", err)
	}
	if out.Mode == idem.ReplicationSynchronous {
		out.Waits = s.cfg.WaitReplicas
	}
	out.Detail = strings.Join(details, "; ")
	return out, nil
}

// weaker reports whether a keeps acknowledged records less surely than b:
// asynchronous, then unknown, then single and synchronous.
func weaker(a, b idem.ReplicationMode) bool {
	rank := func(m idem.ReplicationMode) int {
		switch m {
		case idem.ReplicationAsynchronous:
			return 0
		case idem.ReplicationUnknown:
			return 1
		}
		return 2
	}
	return rank(a) < rank(b)
}

func (s *Store) nodeReplication(ctx context.Context, c redisclient.Client) (idem.Replication, error) {
	var d strings.Builder
	if addr := redisclient.Addr(c); addr != "" {
		d.WriteString(addr + ": ")
	}
	info, err := c.Do(ctx, "INFO", nil, "replication").Text()
	if err != nil && !isServerRefusal(err) {
		return idem.Replication{}, err
	}
	fields := parseInfo(info)
	role := fields["role"]
	n, nerr := strconv.Atoi(fields["connected_slaves"])
	fmt.Fprintf(&d, "role=%s connected_slaves=%s", orUnknown(role), orUnknown(fields["connected_slaves"]))
	if cfg, err := c.Do(ctx, "CONFIG", nil, "GET", "min-replicas-to-write").Map(); err == nil {
		if v, ok := cfg["min-replicas-to-write"].(string); ok {
			d.WriteString(" min-replicas-to-write=" + v)
		}
	} else if !isServerRefusal(err) {
		return idem.Replication{}, err
	}
	if s.cfg.WaitReplicas > 0 {
		fmt.Fprintf(&d, " WaitReplicas=%d", s.cfg.WaitReplicas)
	}
	r := idem.Replication{Replicas: n}
	switch {
	case role != "master" || nerr != nil:
		r.Mode = idem.ReplicationUnknown
	case s.cfg.WaitReplicas > 0:
		r.Mode = idem.ReplicationSynchronous
	case n > 0:
		r.Mode = idem.ReplicationAsynchronous
	default:
		r.Mode = idem.ReplicationSingle
	}
	r.Detail = d.String()
	return r, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// asyncError is the error of a store that will not acknowledge records on
// a master with replicas it does not wait for: it matches
// idem.ErrAsyncReplication and idem.ErrUnavailable.
func asyncError(op string, r idem.Replication) error {
	return idem.StoreError(context.Background(), op, fmt.Errorf("%w (%s): set redisstore.Config.WaitReplicas to the number of replicas "+
		"each write must reach, or Config.AllowAsyncReplication to accept that a failover may run an acknowledged key again",
		idem.ErrAsyncReplication, r.Detail))
}

// checkReplication is Check's part: a master with replicas and no
// WaitReplicas fails (or warns, with AllowAsyncReplication); fewer
// replicas connected than WaitReplicas is a warning (every write fails
// until they are back).
func (s *Store) checkReplication(ctx context.Context) error {
	r, err := s.Replication(ctx)
	if err != nil {
		return err
	}
	s.gate.set(r)
	switch {
	case r.Mode == idem.ReplicationAsynchronous && !s.cfg.AllowAsyncReplication:
		return asyncError("check", r)
	case r.Mode == idem.ReplicationAsynchronous:
		s.cfg.Logger.WarnContext(ctx, "redisstore: asynchronous replication allowed by configuration; "+
			"a failover may lose acknowledged records and run their keys again", "replication", r.Detail)
	case r.Mode == idem.ReplicationSynchronous && r.Replicas < r.Waits:
		s.cfg.Logger.WarnContext(ctx, "redisstore: fewer replicas connected than Config.WaitReplicas; "+
			"every write fails until enough are back", "replication", r.Detail)
	case r.Mode == idem.ReplicationUnknown:
		s.cfg.Logger.WarnContext(ctx, "redisstore: the replication of the server cannot be read", "replication", r.Detail)
	}
	return nil
}

// replicationRecheck is how long a verdict of the replication gate holds
// before the next Begin reads INFO replication again.
const replicationRecheck = 5 * time.Second

// gate keeps the last replication verdict, for a store that refuses to
// grant claims on a master with replicas it does not wait for (WaitReplicas
// 0, AllowAsyncReplication false). There is no background goroutine: the
// first Begin after the verdict has aged reads it again, one caller at a
// time, while the others wait for it; a fresh verdict costs Begin one
// atomic load.
type gate struct {
	mu sync.Mutex // held while reading the replication
	v  atomic.Pointer[verdict]
}

type verdict struct {
	at     time.Time
	refuse error // asyncError, or nil
}

func (g *gate) set(r idem.Replication) {
	v := &verdict{at: time.Now()}
	if r.Mode == idem.ReplicationAsynchronous {
		v.refuse = asyncError("begin", r)
	}
	g.v.Store(v)
}

// fresh returns the verdict when it is younger than replicationRecheck.
func (g *gate) fresh() (*verdict, bool) {
	v := g.v.Load()
	return v, v != nil && time.Since(v.at) < replicationRecheck
}

// admit returns the error Begin answers with when the store refuses
// claims, reading the replication again when the last verdict is older
// than replicationRecheck. A failure to read keeps the last verdict (the
// Begin that follows fails on its own if the server is down).
func (s *Store) admit(ctx context.Context) error {
	if s.cfg.WaitReplicas > 0 || s.cfg.AllowAsyncReplication {
		return nil
	}
	g := &s.gate
	if v, ok := g.fresh(); ok {
		return v.refuse
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.fresh()
	if ok {
		return v.refuse
	}
	r, err := s.Replication(ctx)
	if err != nil {
		if v != nil {
			return v.refuse
		}
		return nil
	}
	g.set(r)
	return g.v.Load().refuse
}
