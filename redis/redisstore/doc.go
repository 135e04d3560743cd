// Package redisstore keeps idempotency records in Redis.
//
// A retried payment reaches two API nodes at once. Both ask Redis about the
// same key; one Lua script runs at a time on the key's node, so exactly one
// of them reads "nothing here" and writes its claim, and the other reads that
// claim and answers "in flight". When the first finishes, its result goes
// into the same record, and every later retry gets it back from one
// round trip — without running the payment again.
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	store, err := redisstore.NewRueidis(c, nil)
//	// or, on a go-redis client the application already has:
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb, nil) // refuses a client without ContextTimeoutEnabled
//	...
//	if err := store.Check(ctx); err != nil { // refuses an evicting server
//		log.Fatal(err)
//	}
//	receipt, err := idem.Do(ctx, store, key, nil, charge)
//
// # Clients
//
// Both Redis clients are accepted, for a single server, a Sentinel-managed
// master or a Cluster: NewRueidis takes a rueidis.Client, New a go-redis
// UniversalClient. The store runs the same scripts and answers the same way
// through either (the test suite runs on both, on a single server, a
// 3-master cluster and through a sentinel).
//
// Choose rueidis for throughput. It pipelines the commands of concurrent
// callers onto shared connections: at 64 callers the store answers
// replays and in-flight duplicates about 1.7× as fast as on go-redis, at
// less CPU and fewer allocations per call (BENCHMARKS.md, "tiered on
// rueidis"), and it honours every context, deadline or cancellation,
// natively. Choose go-redis when the application already has a go-redis
// client configured (pools, TLS, sentinel, hooks) and a second client is
// not worth it; it must then have ContextTimeoutEnabled (see "Errors and
// deadlines"). At one caller, with nothing to pipeline, rueidis is not
// ahead (BENCHMARKS.md, "rueidis beside go-redis").
//
// # Records
//
// Each record is one hash at Prefix + hex(key digest): no client-chosen
// string and no scope becomes part of a Redis key. The fields are a version
// ("v" = "1"; a record of an unknown version is refused, never misread),
// the state, the fingerprint, the owner token, the fence, the acquired,
// lease-until and expires-at times in microseconds of the server's clock,
// and two optional flags: whether the owner acquired by takeover, and
// whether an owner called MarkStarted (records written before the flags
// existed read as neither).
// The key's TTL is the record's expiry (PEXPIREAT, rounded up to a
// millisecond): Redis deletes expired records by itself, and Complete and
// Release keep the TTL. Extend pushes it out when a lease outlives the
// retention.
//
// # Atomicity
//
// Begin, Complete, Release, Extend and MarkStarted are each one Lua script
// on one key (EVALSHA, falling back to EVAL when the server lost its script
// cache), so they are single round trips that work unchanged on a cluster.
// The script
// reads the record, decides and writes in one step; the owner token is
// compared in the same step as every write. Times come from TIME inside the
// script; Redis 5 and newer replicate a script's effects, not the script,
// so replicas never re-read the clock. Tokens are generated in Go from
// crypto/rand and passed to the script.
//
// Adopt, CompleteUntil and Forget exist for a layered store (package
// tiered) that copies decisions of a durable store into Redis; they
// decide nothing themselves.
//
// Get is one HMGET. Purge SCANs the keys under Prefix on every master and
// deletes, with a script that compares in the same step (pipelined, one
// round trip per batch), only records whose logical expiry passed; with
// TTLs in place it normally finds nothing (see Store.Purge). List reads
// the records it SCANs in pipelined batches the same way.
//
// # Guarantees
//
// What holds:
//
//   - At most one owner per key at a time, as long as Redis keeps the
//     record: 200 goroutines racing for a key get one Acquired.
//   - A stale or forged owner (after a takeover, a release, a completion,
//     or a restart that lost the record) gets idem.ErrLeaseLost and
//     changes nothing.
//   - A crash of the holder: its lease runs out by Redis's clock and a retry
//     takes the claim over with a larger fence (tested by SIGKILLing a
//     process that holds a claim).
//   - A reply lost on the wire: go-redis resends a command whose read timed
//     out (MaxRetries, 3 by default); on rueidis, which never resends a
//     script, the store itself sends a command again after a transport
//     error while the caller's context is alive (at most twice: this also
//     covers the first command on a connection that died with a restarted
//     server, which go-redis avoids by checking pooled connections). A
//     resent Begin finds the claim of its
//     own token and answers Acquired again, with the same fence and a
//     renewed lease, never InFlight about the caller's own claim; a resent
//     Complete keeps the first result and succeeds; Extend and MarkStarted
//     are idempotent for their owner; a resent Release recognises its own
//     call (a nonce) and answers as the first run did, while a second
//     Release call by the owner gets ErrLeaseLost.
//     (Tested by dropping the reply in a TCP proxy in front of a real
//     server.)
//   - Redis down, black-holed or resetting connections: every operation
//     returns an error for which idem.IsUnavailable is true, or the
//     caller's context error once the caller's deadline has passed;
//     nothing is decided in Go. See "Errors and deadlines".
//   - A restart (SIGKILL included) of a server with appendonly yes and
//     appendfsync always loses nothing acknowledged: claims, results,
//     marks and fences come back, pooled connections fail as unavailable
//     and the store recovers by itself. idemtest.RunFaults runs against
//     such a server through a TCP fault proxy: lost replies, black holes,
//     a partitioned holder, resets in mid-reply, the restart.
//   - Restart from an older RDB snapshot, or a failover to a replica that
//     lagged: fences still only grow. A new fence is the larger of the
//     stored one plus one and the server clock in microseconds, and a
//     snapshot cannot hold a fence from the future, as long as the server
//     clock does not step back (see below). Tested by restarting a private
//     server from a snapshot taken before later claims.
//   - Clock jumps of the application hosts change nothing: only the Redis
//     server's clock is read. Fences grow with that clock, so they keep
//     growing after a record expired and was deleted.
//
// What does not hold, and what to do about it:
//
//   - Redis is memory first. A restart without persistence, a FLUSHALL, or
//     an eviction loses records; a restart from an older snapshot or a
//     failover to a lagging replica loses the writes after it, and brings
//     back the claims it holds. The owner of a lost claim gets
//     ErrLeaseLost at Complete, but a retry that arrives meanwhile executes
//     again; a completed record that is lost lets its retry execute again;
//     a claim that comes back from a snapshot blocks its key until its
//     lease ends (by the server clock), then is taken over. Run Redis with
//     appendonly (appendfsync everysec or always) and maxmemory-policy
//     noeviction (Check enforces the latter), set Config.WaitReplicas on
//     a master with replicas (see Replicas), or put a durable store behind
//     it (package tiered), or keep a unique constraint in your own
//     database as the correctness backstop.
//   - A Redis clock step moves every lease and expiry: a step forward can
//     expire live leases early (a takeover while the holder still works,
//     fenced out by the fence) and records early (a retry executes again);
//     a step backward keeps records and leases longer, and fences issued
//     after it grow by one from the stored value (never back) but may fall
//     behind fences issued for other keys before the step. The same holds
//     for a failover to a replica whose clock is behind. (Tested on the
//     state a step leaves, stored times and fences seen from a moved
//     clock: Debian's redis-server uses jemalloc, which cannot run under
//     libfaketime.)
//   - On go-redis, a cancellation (context.WithCancel, no deadline) does
//     not interrupt a call that is waiting for Redis: go-redis turns only
//     deadlines into socket deadlines. The call ends at the context's
//     deadline, if any, or at the client's ReadTimeout, and then reports
//     the caller's context.Canceled. Give callers deadlines, or use
//     rueidis, which returns at the cancellation.
//
// # Errors and deadlines
//
// New refuses a go-redis client created without ContextTimeoutEnabled
// (a *idem.ConfigError for Field "client"): without it go-redis ignores the context's
// deadline and waits for its ReadTimeout, 3s by default and again for each
// retry, so a black-holed Redis would hold every caller, lease renewal and
// tiered fast path far past the budget it chose. A client of another type
// (a wrapper) is refused unless Config.AssumeContextTimeouts vouches for
// it. Every call is then bounded by the caller's deadline or the client's
// ReadTimeout, whichever comes first. NewRueidis needs no such check:
// rueidis bounds every call by its context, and by ConnWriteTimeout when
// a connection stops answering.
//
// The caller's context decides what a failure is. When it has ended (or
// its deadline has passed), an operation returns its error:
// errors.Is(err, context.DeadlineExceeded) or context.Canceled, and
// idem.IsUnavailable is false: the store did not fail, the caller stopped
// waiting. While it is alive, every failure, dial and read timeouts
// included, is unavailable (fail closed: HTTP 503 with Retry-After), and
// never matches a context error, even when go-redis reports its own dial
// timeout as one.
//
// # The started mark
//
// MarkStarted sets the record's mark in the script that checks the owner.
// A Begin that takes the claim over copies the mark into the new claim and
// reports Claim.Started, so every later takeover sees it too; Release
// clears it, and a fresh acquisition (nothing stored, expired, released)
// starts without it. Like every record, the mark lives in Redis's memory:
// whatever loses the record (see Guarantees) loses the mark, and the next
// Begin is a fresh acquisition that executes.
//
// # Replicas
//
// Redis replicates asynchronously: a master acknowledges a write before
// any replica has it, and a failover to a replica loses what had not
// reached it. For idem that is the worst kind of loss: a result the caller
// was given disappears and its key runs again on the next retry, with a
// different answer (issue 33 measured 379 of 3,932 acknowledged results
// lost when the replica was cut off 300ms before the master died).
//
// Config.WaitReplicas = n makes every write that decides ownership or a
// result wait for n replicas: a Begin that acquires (a takeover too) or
// replays, MarkStarted, Extend, Complete, CompleteUntil, Hold, Release,
// Adopt and Resolve send "WAIT n timeout" right behind their script, on the same
// connection and in the same write (a go-redis pipeline on the master's
// connection; a dedicated rueidis connection, since rueidis treats WAIT
// as a blocking command). WAIT costs no extra client round trip, only the
// replica's acknowledgement (tested by counting the client's writes).
// When fewer than n replicas acknowledged within Config.WaitTimeout
// (default 1s), the call fails with ErrNotReplicated, for which
// idem.IsUnavailable is true (HTTP 503 through the proxy): nothing runs
// on a claim, and no result is served, that a failover could lose.
// A replay rewrites a field of the record before its WAIT, and so does a
// resend that finds its own earlier write, so that the WAIT covers the
// write that is being answered even if another connection made it,
// however the server tracks a connection's last write (Redis 7.0 already
// makes a WAIT after a command that wrote nothing wait for everything
// the master had written; the rewrite does not rely on it).
// A Begin that finds the key in flight or mismatched answers as it
// would without replicas.
//
// A Begin that acquired but whose WAIT fell short leaves its claim on the
// master, unacknowledged: the caller gets an error and must not run, and
// the claim lapses at the end of its lease (retries meanwhile answer
// InFlight). It is not released, because a Release clears the started
// mark that a takeover must keep (AtMostOnce relies on it), and a Release
// would be as unacknowledged as the claim.
//
// What WAIT does not promise. WAIT is not consensus: it says that n
// replicas had the write when the call returned. A failover keeps it only
// if it promotes one of them. With one replica and WaitReplicas 1 that is
// the replica; with more replicas than WaitReplicas, Sentinel (or the
// cluster's failover) may promote one that missed the write. Sentinel
// prefers the replica with the largest replication offset (after
// replica-priority), which narrows this to a replica lagging the others;
// setting WaitReplicas to the number of replicas closes it, at the price of
// failing every write while one replica is down. min-replicas-to-write on
// the master makes it refuse writes when too few replicas are connected,
// which narrows the window in which a partitioned old master accepts
// writes that will be lost; it does not make a write wait. A master that
// crashes and restarts before a failover, without persistence, comes back
// empty and its replicas copy the emptiness: run with appendonly, or
// disable automatic restarts. The old master must be fenced off (killed)
// before clients are switched to the new one (the HA manager's job;
// docs/replication.md). Tested: a master and a replica, three failovers,
// each preceded by a 300ms cut of the replication link and a SIGKILL of
// the master, with and without AtMostOnce: 0 acknowledged results lost,
// 0 keys run twice (idemtest.RunFailover), on both clients.
//
// In a Cluster each key's WAIT goes to the master of its slot, on that
// connection, and waits for that master's replicas; a MOVED reply (a
// stale slot map) sends the script and the WAIT again, an ASK reply (a
// slot in migration) is returned as unavailable. On Sentinel the go-redis
// failover client and rueidis's sentinel client are bound to the current
// master, and WAIT goes there. WaitReplicas needs a client the store can
// pipeline on: a go-redis *redis.Client (single node or sentinel) or
// *redis.ClusterClient (New refuses a Ring), or any rueidis client.
//
// Without WaitReplicas, a master with replicas attached is refused: Check
// fails with an error matching idem.ErrAsyncReplication (and
// idem.ErrUnavailable), and Begin refuses with it, unless
// Config.AllowAsyncReplication is set (then Check logs a warning). Begin
// reads INFO replication at its first call and again when its verdict is
// 5 seconds old, without a goroutine, so a replica that attaches or leaves
// changes the answer within seconds. Store.Replication reports the verdict
// (idem.ReplicationReporter), the weakest over a cluster's shards.
// BeginWithToken, the path of a layered store, does not refuse: tiered
// keeps its decisions in its durable store.
//
// tiered, Redis in front of a synchronously replicated SQL store, is the
// configuration that keeps Redis's fast path and loses nothing in a Redis
// failover: Redis answers only with results the durable store holds, and
// never grants a claim. Set AllowAsyncReplication on that redisstore (no
// WaitReplicas needed): its Begin is not used, but its Check would refuse.
//
// # Check
//
// Check reads maxmemory-policy on every master (CONFIG GET, or INFO memory
// when a managed server forbids CONFIG) and refuses anything but
// noeviction: the volatile-* policies evict exactly keys with a TTL, which
// is every record here. A server that reveals its policy to neither command
// is refused too; Config.AllowEviction turns both refusals into a logged
// warning. A server that refuses the connection's credentials (WRONGPASS,
// NOAUTH) is reported as that, not as an unreadable policy.
package redisstore
