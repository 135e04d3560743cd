// Package kafkainbox consumes Kafka topics as a consumer group through an
// [inbox.Inbox], so that records read again execute once, in partition
// order, an outage is waited out instead of spending a record's retries,
// and one failing record never stalls the other partitions.
//
// Kafka consumers read records again all the time: after a rebalance, a
// restart, a crash before the offset commit, or a commit that failed. The
// producer's idempotence (PID + sequence) only covers a producer's own
// retries within one session; it cannot help the consumer. A [Subscriber]
// runs every record through [inbox.Inbox.Process] (dedup row and business
// writes in one database transaction) and commits the group's offset only
// for records whose transaction committed.
//
//	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
//	sub, _ := kafkainbox.New(ib, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts …`)
//		return err
//	}, &kafkainbox.Config{Brokers: brokers, Group: "ledger", Topics: []string{"payments"},
//		DeadLetterTopic: "payments-dlq"})
//	_ = sub.Start(ctx)
//	defer sub.Stop(ctx)
//
// # Message IDs
//
// The dedup key is the record header "idem-message-id"
// ([DefaultMessageIDHeader], or Config.MessageIDHeader), or what
// Config.MessageIDFunc returns. Without a MessageIDFunc, a record without
// the header falls back to "topic/partition/offset". Decision: the fallback
// is safe against the consumer-side repeats above (the same record has the
// same position), so a record without an ID is still processed once — but
// it is NOT a business ID: a producer that sends the same event twice
// creates two offsets, and both run. Give business events an ID header.
// (Deleting and recreating a topic restarts its offsets: with the fallback,
// keep the inbox consumer name, Config.Consumer, different for the new
// topic.) With a MessageIDFunc there is no fallback: its error (or an empty
// ID) fails the attempt like a handler error and the record is retried;
// falling back would key one event two ways and apply it twice.
//
// Records are read with the ReadCommitted isolation level: records of
// aborted transactions are never applied.
//
// # Order, queues and commits
//
// Each assigned partition has its own goroutine that processes its records
// one at a time, in offset order; partitions run concurrently. The poll
// loop never waits for a partition: it queues each partition's records for
// its goroutine and pauses the partition (PauseFetchPartitions) while its
// queue holds Config.MaxPollRecords records or its current record is
// failing, and resumes it afterwards (records the client had buffered for
// a paused partition are fetched again from the same offset). So a slow or
// failing partition never stalls the others, and a rebalance is never held
// up by one.
//
// The last processed record's offset is committed synchronously (auto-commit
// is disabled) whenever a partition's queue runs empty, every
// Config.MaxPollRecords records, before a record's first retry, and when
// the partition is revoked: the goroutine finishes the record it is on,
// commits and exits before the revoke completes (BlockRebalanceOnPoll,
// OnPartitionsRevoked), so the next owner starts right after the last
// processed record. Records processed but not yet committed at a crash are
// read again and acked by the inbox as duplicates. While a partition holds
// parked records (below), its commit stays at the first of them.
//
// # Early records: parking (Strict watermarks)
//
// A record whose handler says it came before its predecessor (an error
// wrapping inbox.ErrNotYet, such as watermark.ErrGap in Strict mode) is
// parked: kept aside in memory while its partition moves on. Parked
// records run again, newest first, as soon as another record was applied on
// any partition of this member, and every Config.ParkRetry (1s) otherwise
// (the predecessor may be another member's); they run again while any of
// them applies. So ten versions of one entity produced in reverse order
// (v10 first, one key, one partition) apply in one pass once v1 arrives,
// 19 handler runs in all; without parking v10 would hold its partition for
// good, since v9 behind it can never overtake it.
//
// Kafka has no per-record acknowledgement, only a committed offset per
// partition, so the offset is never committed past a parked record: the
// commit of its partition stays at the first parked record until it is
// applied, and the records after it that were done are read again after a
// crash, restart or rebalance, as Duplicates. A parked record lives only in
// the member's memory: a SIGKILL loses nothing, the partition's next owner
// reads the record again from the committed offset and parks it in turn.
// On a revoke or Stop, parked records are dropped unapplied, for the next
// owner.
//
// At most Config.MaxParked records (default 100, all partitions of the
// member) are parked; beyond that an early record is retried in place, its
// partition paused, like an infrastructure failure (Failing reports it).
// A parked record that fails in another way when it runs again is handled
// like any failing record (retried in place, dead-lettered after
// MaxFailures). Subscriber.Stats reports how many are parked (Parked).
//
// # Verdicts and dead letters
//
// natsinbox, amqpinbox and kafkainbox decide alike: one engine (the
// module's internal adapter package) turns each attempt's error into what
// becomes of the message, with the same Config names (MaxFailures,
// BackoffFunc, TransientBackoffFunc, ProcessTimeout, MaxParked, Observer,
// Logger) and the same counts ([inbox.DeliveryStats]); each adapter only
// says how its broker is told. A table in the driver tests
// (internal/drivertest/inboxengine) runs the same cases through all three.
//
// A handler that panics fails its message like an error (the panic is
// recovered, its value and the start of its stack are the error, and the
// transaction is rolled back): the process goes on.
//
// Kafka has no per-record nack, and skipping a record would break the
// partition's order, so a failing record is retried in place while its
// partition is paused. The handler's error is its verdict (see
// [inbox.Permanent]):
//
//   - nil: done; the partition moves on.
//   - an infrastructure failure ([inbox.IsTransient]: the database or Redis
//     unreachable, a connection reset, a deadlock, a serialization failure,
//     a lock timeout, a statement the server cancelled — statement_timeout
//     behind a migration's LOCK TABLE, KILL QUERY), or
//     Config.ProcessTimeout expired. Only errors idem can recognise as
//     infrastructure count (a driver's, a network operation's, the inbox's
//     own statements'): an io.EOF or io.ErrUnexpectedEOF from decoding the
//     value (encoding/json on an empty or truncated body) is an ordinary
//     failure, so a malformed record ends as poison instead of pausing
//     its partition for good. Infrastructure failures are retried with
//     Config.TransientBackoffFunc (100ms doubling to 5s) for as long as it
//     lasts. Never spends the poison budget.
//   - an error wrapping inbox.ErrNotYet (the record came before the one it
//     depends on, e.g. watermark.ErrGap): parked (see above), never
//     counted as a failure; with the parking lot full (or MaxParked < 0)
//     retried in place like an infrastructure failure, its partition
//     paused and reported by Failing.
//   - inbox.Permanent(err): to Config.DeadLetterTopic at once. Without a
//     dead-letter topic the partition is parked: no more attempts until it
//     is reassigned (a restart, a rebalance), reported by
//     [Subscriber.Failing] with Parked set and logged at Error.
//   - any other error: retried after Config.BackoffFunc(n); after
//     Config.MaxFailures failures the record goes to Config.DeadLetterTopic
//     and the partition moves on. Without a dead-letter
//     topic the record keeps being retried at the backoff's pace (at most
//     every 10 s by default) and the partition stays paused, logged at
//     Error and reported by [Subscriber.Failing]: the safe default when
//     records carry money.
//
// The dead-lettered copy is the original's key, value and headers, followed
// by [ErrorHeader] ("Idem-Error", at most 1 KiB), [FailuresHeader]
// ("Idem-Failures"), [SourceHeader] ("Idem-Source": topic/partition/offset)
// and [AttemptsHeader] ("Idem-Attempts", infrastructure failures included).
// A dead-letter produce that fails is retried with the record; the offset
// never passes a record that was neither processed nor dead-lettered.
//
// # Metrics
//
// [Subscriber.Stats] (an [inbox.DeliveryStats], the same for every broker
// adapter) counts processed, duplicate, retried and dead-lettered
// records and the parked ones, and Config.Observer (an [inbox.Observer]) is told
// each one; promidem.NewInboxObserver makes them the Prometheus counter
// idem_inbox_messages_total{adapter="kafka", consumer, outcome}. [Subscriber.Failing] lists the partitions paused on a failing
// record, with the error: what to alert on.
//
// # Lifecycle
//
// [Subscriber.Start] creates the franz-go client (Config.ClientOpts for TLS,
// SASL, timeouts) and joins the group. [Subscriber.Stop] stops polling, lets
// each partition finish its current record and commit, leaves the group and
// closes the client; if its context ends first, running handlers are
// cancelled and their records stay uncommitted. A Subscriber runs once.
//
// The Stop bound: a partition's worker stops at once between attempts (a
// backoff, an in-place retry of an infrastructure failure or an early
// record is cut short, and the record stays uncommitted for the next
// owner), so during a database outage Stop(context.Background()) returns
// after at most one Config.ProcessTimeout, the attempt running when Stop
// was called. Give Stop a context with a deadline for a hard bound.
//
// # Guarantees
//
// What holds:
//   - Database outage: records wait (their partitions paused), none is
//     dead-lettered or skipped, and each has one effect once the database is
//     back. Tested with PostgreSQL refused for 60 s while records (and
//     repeats) arrive on four partitions, a dead-letter topic configured.
//   - Consumer SIGKILL anywhere leaves either no trace (rolled back) or a
//     committed dedup row (the record read again is a Duplicate). Tested by
//     SIGKILLing a consumer process between the transaction commit and the
//     offset commit.
//   - No loss: an offset is never committed past a record that has not
//     committed (or been dead-lettered). Tested by a record that keeps
//     failing and a restart that resumes exactly at it, and by a consumer
//     process SIGKILLed while it holds a parked record and has applied the
//     records behind it: no offset it committed (every OffsetCommit is
//     watched on the broker) passes the parked record, and the member
//     replacing it applies the record once its predecessor arrives.
//   - Early records fill a gap in one pass (parking): tested with ten
//     reversed versions of one entity in Strict mode, 19 handler runs.
//   - A failing record pauses only its partition: the member's other
//     partitions flow and a member joining the group gets its rebalance
//     through. Tested with one record failing while records keep arriving
//     on every partition and a second member joins.
//   - Per-partition order, including across rebalances (the revoke waits
//     for the record in flight).
//   - Kafka unreachable: polling retries; nothing is committed that was not
//     processed.
//   - Clock jumps do not matter: positions are offsets; the inbox stamps rows
//     with database time.
//
// What does not:
//   - Order across partitions, or of events whose key changed partition.
//     Dedup is not ordering: use the inbox's version watermarks.
//   - A lost partition (session expired while a handler was slow) can be
//     processed by the new owner at the same time as the old one finishes:
//     the database's unique index still lets only one commit.
//   - A record retried through a long outage holds its partition; a
//     rebalance waits for the attempt in flight (at most
//     Config.ProcessTimeout), so keep that below the group's rebalance
//     timeout.
//   - The poison budget restarts with the member (it is counted in the
//     goroutine): after a rebalance or restart a poison record gets
//     Config.MaxFailures attempts again.
//   - Parking has no time limit: a record whose predecessor never comes
//     stays parked, and its partition's committed offset stays behind it
//     (consumer lag grows; after a restart the records behind it are read
//     again as Duplicates). Watch Subscriber.Parked and the group's lag.
//   - Order within a partition: a parked record is applied after records
//     behind it. Parking happens only for records whose handler returned
//     inbox.ErrNotYet, i.e. handlers that check order themselves.
//   - Broker restarts and failover are not exercised (see Testing).
//   - Dedup beyond the inbox retention window; side effects outside the
//     transaction.
//
// # Testing
//
// No Kafka server runs on the development machine: the tests use
// github.com/twmb/franz-go/pkg/kfake, an in-process Kafka cluster speaking
// the real protocol over TCP (the crash test's child process connects to it
// too), with the inbox on PostgreSQL. Covered: per-partition order with
// concurrent partitions, commit-after-processing with a resuming group, the
// same message twice in one poll, poison records to a dead-letter topic,
// inbox.Permanent parking a partition, a failing record pausing only its
// partition across a rebalance, aborted transactions not applied, a
// failing MessageIDFunc retried without a fallback key, a 60 s database
// outage through a fault proxy, a consumer killed between commit and
// offset commit, a consumer killed while it holds a parked record, ten
// reversed versions of one entity parked and applied in one pass, and
// 10,000 records (30% duplicates, 3% failures) through three group
// members stopped and replaced every ~150ms. kfake is not
// Kafka: broker restarts and failover and real-world rebalance timing are
// not exercised here.
package kafkainbox
