package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem/redis/internal/redisclient"
)

// ErrEvictionPolicy is returned by Check when a server's maxmemory-policy
// may evict keys, or when the policy cannot be read at all.
var ErrEvictionPolicy = errors.New("redisstore: the Redis server may evict idempotency records")

// ErrServerVersion is returned by Check for a server older than Redis 5,
// which does not replicate scripts by their effects (the scripts read TIME).
var ErrServerVersion = errors.New("redisstore: Redis 5.0 or newer is required")

// Check verifies every server the client writes to (each master of a
// cluster or ring):
//
//   - the maxmemory-policy must be "noeviction". Every other policy may
//     delete keys under memory pressure, and the volatile-* policies pick
//     exactly keys with a TTL, which is every record here. An evicted claim
//     is a duplicate waiting to happen, so Check fails with
//     ErrEvictionPolicy, unless Config.AllowEviction is set, in which case
//     it logs a warning and returns nil;
//   - the server is Redis 5.0 or newer (ErrServerVersion);
//   - the database the client selects exists: a DSN naming /99 on a
//     server with 16 databases fails with "DB index is out of range";
//   - replication (Store.Replication): a master with replicas attached
//     while Config.WaitReplicas is 0 fails with an error matching
//     idem.ErrAsyncReplication (and idem.ErrUnavailable), unless
//     Config.AllowAsyncReplication is set, in which case it logs a
//     warning. Fewer replicas connected than WaitReplicas, or a role that
//     cannot be read, is logged as a warning. In a cluster each shard is
//     judged on its own.
//
// The policy is read with CONFIG GET; servers that refuse CONFIG (many
// managed services rename or forbid it) are asked through INFO memory,
// which reports maxmemory_policy too. A server that answers neither is
// treated as a policy that may evict: Check fails (or warns, with
// AllowEviction), because an unverified policy is not a safe one.
//
// Network failures are returned as errors for which idem.IsUnavailable is
// true, whatever AllowEviction says.
func (s *Store) Check(ctx context.Context) error {
	err := s.c.ForEachMaster(ctx, func(ctx context.Context, node redisclient.Client) error {
		return s.checkNode(ctx, node, redisclient.Addr(node))
	})
	if err != nil {
		return err
	}
	return s.checkReplication(ctx)
}

func (s *Store) checkNode(ctx context.Context, c redisclient.Client, addr string) error {
	where := "the Redis server"
	if addr != "" {
		where = "Redis at " + addr
	}
	info, err := c.Do(ctx, "INFO", nil).Text() // the default sections include server and memory
	if isDBIndexError(err) {
		// The connection's SELECT failed: every command is refused the
		// same way, which says nothing about CONFIG or INFO.
		return fmt.Errorf("redisstore: check: %s has no such database (DB index is out of range): "+
			"the DSN names a database number at or above the server's databases setting: %w", where, err)
	}
	if isAuthError(err) {
		// Not a refusal of INFO: the connection was never let in.
		return fmt.Errorf("redisstore: check: %s refused the credentials: %w", where, err)
	}
	if err != nil && !isServerRefusal(err) {
		return s.fail(ctx, "check", err)
	}
	fields := parseInfo(info)
	if v, ok := fields["redis_version"]; ok {
		if major, _, _ := strings.Cut(v, "."); major != "" {
			if n, err := strconv.Atoi(major); err == nil && n < 5 {
				return fmt.Errorf("%w: %s runs %s", ErrServerVersion, where, v)
			}
		}
	}

	policy := ""
	cfg, err := c.Do(ctx, "CONFIG", nil, "GET", "maxmemory-policy").Map()
	switch {
	case err == nil:
		policy, _ = cfg["maxmemory-policy"].(string)
	case isServerRefusal(err):
		policy = fields["maxmemory_policy"] // managed servers: INFO still tells
	default:
		return s.fail(ctx, "check", err)
	}

	var problem error
	switch policy {
	case "noeviction":
		return nil
	case "":
		problem = fmt.Errorf("%w: %s does not reveal its maxmemory-policy (CONFIG GET and INFO refused); "+
			"make sure it is noeviction, then set Config.AllowEviction to start anyway", ErrEvictionPolicy, where)
	default:
		problem = fmt.Errorf("%w: %s has maxmemory-policy %q; set it to noeviction "+
			"(an evicted claim lets a duplicate execute), or set Config.AllowEviction", ErrEvictionPolicy, where, policy)
	}
	if !s.cfg.AllowEviction {
		return problem
	}
	s.cfg.Logger.WarnContext(ctx, "redisstore: eviction allowed by configuration; evicted records let duplicates execute",
		"server", addr, "maxmemory_policy", policy)
	return nil
}

// isServerRefusal reports whether err is Redis answering with an error
// (unknown or forbidden command), rather than failing to answer.
func isServerRefusal(err error) bool {
	return redisclient.IsServerError(err)
}

// isDBIndexError reports whether err is Redis refusing the connection's
// SELECT of a database it does not have.
func isDBIndexError(err error) bool {
	var se *redisclient.ServerError
	return errors.As(err, &se) && strings.Contains(se.Msg, "DB index is out of range")
}

// isAuthError reports whether err is Redis refusing the connection's
// credentials (a wrong password, a disabled user, a missing AUTH).
func isAuthError(err error) bool {
	var se *redisclient.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return strings.HasPrefix(se.Msg, "WRONGPASS") || strings.HasPrefix(se.Msg, "NOAUTH")
}

// parseInfo reads the "field:value" lines of an INFO reply.
func parseInfo(info string) map[string]string {
	out := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}
