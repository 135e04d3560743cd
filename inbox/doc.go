// Package inbox makes a message consumer idempotent: under at-least-once
// delivery every message is handled, and its effects committed, once —
// however often the broker delivers it.
//
// A payment-captured event is delivered, the wallet is credited, and the
// consumer crashes before it acks. The broker delivers the event again, and
// again when a rebalance moves the partition. Duplicates are the normal case,
// not an accident. The inbox writes a dedup row (consumer, message ID) in the
// SAME local transaction as the business change: either both commit or
// neither does.
//
//	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
//	_ = ib.Migrate(ctx)
//	out, err := ib.Process(ctx, "wallet", msg.ID, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE wallet SET balance = balance + $1 WHERE id = $2`, amt, id)
//		return err
//	})
//	// err == nil (Processed or Duplicate): ack.  err != nil: nack, redeliver.
//
// # Sections
//
//   - Process: begin; INSERT the dedup row (ON CONFLICT DO NOTHING, INSERT
//     IGNORE on MySQL) as the first statement; 0 rows affected → Duplicate,
//     roll back, skip the handler; 1 row → run the handler in the same
//     transaction and commit. A handler error rolls back the dedup row too,
//     so the redelivery is processed normally (marking a message "seen"
//     before the handler succeeded would lose it).
//   - ProcessTx: the same inside the caller's transaction (to write an
//     outbox row atomically with the dedup row). It never commits or rolls
//     back; on an error the caller must roll back. ProcessIn does the same
//     for a transaction of any driver through the one-method Execer
//     interface; package pgxinbox wraps it for pgx.Tx.
//   - ProcessEngine: Process with the transaction run by an Engine of the
//     caller's, handed the dedup insert as a Claim (a plain INSERT: a
//     duplicate's unique violation aborts the transaction before the
//     business statements). pgxinbox.ProcessBatch sends BEGIN, the claim
//     and the business statements in one pgx.Batch, so the dedup row costs
//     no round trip of its own. Through database/sql none can be saved:
//     Process sends only BEGIN, the insert, the handler's statements and
//     COMMIT (no SELECT, no SAVEPOINT), and database/sql sends each
//     statement on its own.
//   - Config.TxOptions: the isolation level of the transactions Process
//     begins.
//   - Retries inside Process: a deadlock or serialization failure anywhere
//     in the transaction runs it again (bounded, Stats.TxRetries); a handler
//     error wrapping ErrNotYet (watermark.ErrGap: the event's predecessor has
//     not arrived) parks the message — roll back, wait with backoff, run
//     again, Config.EarlyRetries times, Stats.EarlyRetries.
//   - FastPath (package redisinbox): an optional Redis "SET NX" in front of
//     the database that answers duplicates of committed messages with one
//     Redis round trip. Its keys include the database's identity
//     (Config.Namespace); a breaker (Config.FastPathBackoff) keeps a failing
//     Redis out of the message path.
//   - BloomConfig: an optional in-process Bloom prefilter; IDs it has
//     certainly not seen skip the lookups and go straight to the insert.
//   - Sweeper: retention; deletes dedup rows older than Config.Retention in
//     bounded batches. The cutoff is read from the database clock once per
//     statement, so the created_at index finds the boundary (a pass with
//     nothing to delete reads no rows; see BENCHMARKS.md).
//   - Package watermark: version watermarks for ordered application
//     (last-writer-wins or strict), with tombstones.
//   - Migrate: embedded, per-dialect migrations, safe to run concurrently.
//   - Broker adapters (natsinbox, amqpinbox, kafkainbox) take a Processor
//     (*Inbox, or a wrapper) and report each delivery's outcome to an
//     Observer (promidem.NewInboxObserver counts them for Prometheus).
//     Verdicts: Permanent, IsTransient (only infrastructure idem can
//     recognise: a bare io.EOF from decoding a payload is poison; and
//     idem.ErrInFlight) and ErrNotYet (the adapters park the message;
//     WithoutEarlyWait).
//   - MessageKey: the idem key of a message, for a handler that processes
//     it in steps (package step) or with idem.Do. See "Messages processed
//     in steps".
//
// # Layers
//
// Bloom ("definitely new"?) → FastPath ("done"?) → database unique key. Only
// the last decides; the others can only answer "duplicate" for a message
// that really was committed, and any failure of theirs (Redis down, flushed,
// evicted, slow; a Bloom false positive) costs time, never correctness.
//
// # Messages processed in steps
//
// A handler whose work has effects in several places (a payment provider,
// another service, a table written in a transaction of its own) runs it
// as steps with step.Do under MessageKey(consumer, messageID), inside the
// handler. Each finished step is stored as a recovery point under the
// message's key; when the consumer dies in the middle of the handler, the
// inbox's transaction rolls back with it and the redelivery resumes at the
// first unfinished step instead of calling the finished ones again
// (tested by SIGKILLing a natsinbox consumer between two steps, and with
// concurrent duplicate deliveries). The handler's own writes still go
// through tx and commit with the dedup row once step.Do returned; a
// failure after it rolls them back, and the redelivery gets step.Do's
// stored result. Rules:
//
//   - A local step commits in a transaction of its own
//     (sqlstore.Store.StepTx), never in tx: its recovery point share-locks
//     the key's record until its transaction ends, and step.Do's
//     completion would wait for tx, which waits for the handler.
//   - A redelivery that comes while the dead consumer's claim still has
//     its lease gets idem.ErrInFlight; IsTransient reports it, so the
//     adapters retry in place until the lease runs out, without spending
//     the message's poison budget.
//   - SQLite has one writer, the inbox's transaction while the handler
//     runs: keep the steps' store, and the local steps' writes, in
//     another database.
//
// # Guarantees
//
// What holds:
//
//   - Exactly one committed handler transaction per (consumer, message ID)
//     within the retention window, with any number of concurrent or
//     sequential deliveries, processes and retries. The database's primary
//     key decides; Go code never reads then writes.
//   - A concurrent redelivery blocks on the first delivery's uncommitted row
//     and then answers correctly: Duplicate if the first committed, Processed
//     if it rolled back.
//   - Crash after the commit, before the ack: the redelivery is a Duplicate
//     (tested by SIGKILLing a consumer process). Crash before the commit:
//     the database rolls the transaction back with the dead connection and
//     the redelivery is Processed.
//   - Database outage (unreachable, connection reset, lock timeout): Process
//     returns the driver's error wrapped (%w) and commits nothing, so the
//     message is not marked seen; inbox.IsTransient recognises the cause,
//     and the adapters redeliver without spending the message's poison
//     budget. Once the database is back the redelivery is processed once
//     (tested through a fault proxy: refused connections, a reset in
//     mid-transaction, a lock timeout). Deadlocks and serialization failures
//     are retried inside Process first.
//   - Redis outage (down, hung, black-holed), flush or restart: Process falls
//     back to the database; no error reaches the consumer because of Redis,
//     nothing is lost, nothing is applied twice. Each fast-path call is
//     bounded by redisinbox.Config.Timeout, also for a go-redis client
//     without ContextTimeoutEnabled; after a failure the breaker skips Redis
//     for Config.FastPathBackoff and then lets one call probe it, so an
//     outage costs about one timeout per backoff, not one per message
//     (tested with a black-holed Redis: the calls that reach it are the ones
//     in flight when it hung). A flushed or restarted Redis has simply
//     forgotten: those duplicates take the database path. One warning is
//     logged per outage.
//   - Fast-path entries never cross databases: keys hash the database's
//     identity (database, schema, table; or Config.Namespace), so two
//     tenants' databases with the same table name behind one Redis never
//     skip each other's messages.
//   - Clock jumps: created_at and the retention cutoff both come from the
//     database clock; application hosts' clocks are never compared. A jump
//     of the database clock shifts retention by the jump. A jump of the
//     host clock only rotates the Bloom filter early or late (speed only).
//
// What does not:
//
//   - Dedup is not ordering: v5 and v7 of an entity are different messages
//     with different IDs, and both are "new". Use package watermark.
//   - A message redelivered after its row was swept is processed again.
//     Retention must cover the broker's redelivery horizon (payment
//     callbacks: at least 7 days; the default).
//   - The handler's effects outside the transaction (HTTP calls, e-mails)
//     are not rolled back and may repeat; write an outbox row instead, or
//     run them as steps (above) keyed so that their service deduplicates
//     them (step.Step.Key).
//   - A failed commit leaves the outcome unknown to this delivery; the next
//     delivery finds out.
//   - During a database outage nothing is processed: messages wait at the
//     broker (the inbox never acks what it could not commit). Redis cannot
//     stand in for the database: it is never the judge.
//   - A Redis that lost a "done" entry (flush, restart from an older
//     snapshot, eviction) costs one database transaction per duplicate,
//     nothing more; a Redis that invents one is not defended against (only
//     committed messages are ever written "done").
//   - Two database servers whose databases, schemas and tables have the
//     same names look alike: give each inbox its own Config.Namespace when
//     they share a Redis.
//   - A handler is run again after a deadlock or an ErrNotYet inside one
//     Process call, like a redelivery: effects outside the transaction
//     repeat.
//   - One message ID names one business action. A producer that sends a new
//     ID on retry defeats any inbox.
//
// # IDs
//
// Consumer names must be 1–255 bytes of UTF-8 without NUL. Message IDs must
// not be empty; an ID over 255 bytes, or one that is not UTF-8 text without
// NUL, is stored as "sha256:<hex>" of its bytes (see StoredMessageID), so any
// broker ID works on all three databases.
//
// # Databases
//
// PostgreSQL (pgx stdlib), MySQL 8 / MariaDB 10.5+ (go-sql-driver), and SQLite
// (modernc.org/sqlite). Process uses the driver's default isolation (READ
// COMMITTED on PostgreSQL, REPEATABLE READ on InnoDB) unless Config.TxOptions
// says otherwise; under PostgreSQL REPEATABLE READ or SERIALIZABLE a
// concurrent duplicate gets a serialization failure instead of waiting, and
// Process runs it again (it then sees the committed row: Duplicate). Open
// SQLite with
//
//	file:PATH?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate
//
// SQLite has one writer: deliveries are serialised, and a small pool (1–2
// connections) avoids busy-wait back-off.
//
// # Bloom prefilter
//
// The Bloom filter only knows what this process committed or saw within its
// window (see BloomConfig for the generation math). It pays off when
// duplicates are frequent and the write transaction is the expensive part:
// without a FastPath, a "maybe seen" ID is answered by one indexed read
// instead of BEGIN/INSERT/ROLLBACK. With a FastPath it saves the Redis
// round trip for new messages. It does not pay off for mostly-unique
// traffic with no FastPath (nothing to skip), and it costs memory
// (about 1.2 MB per million IDs per generation at 1%).
package inbox
