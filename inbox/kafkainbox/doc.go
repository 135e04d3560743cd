// Package kafkainbox consumes Kafka topics as a consumer group through an
// [inbox.Inbox], so that records read again execute once, in partition
// order.
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
//	}, &kafkainbox.Config{Brokers: brokers, Group: "ledger", Topics: []string{"payments"}})
//	_ = sub.Start(ctx)
//	defer sub.Stop(ctx)
//
// # Message IDs
//
// The dedup key is the record header "idem-message-id"
// ([DefaultMessageIDHeader], or Config.MessageIDHeader), or what
// Config.MessageIDFunc returns. A record without one falls back to
// "topic/partition/offset". Decision: the fallback is safe against the
// consumer-side repeats above (the same record has the same position), so a
// record without an ID is still processed once — but it is NOT a business
// ID: a producer that sends the same event twice creates two offsets, and
// both run. Give business events an ID header. (Deleting and recreating a
// topic restarts its offsets: with the fallback, keep the inbox consumer
// name, Config.Consumer, different for the new topic.)
//
// # Order and commits
//
// Each assigned partition has its own goroutine that processes its records
// one at a time, in offset order; partitions run concurrently. After each
// polled batch of a partition, the last processed record's offset is
// committed synchronously (auto-commit is disabled). When partitions are
// revoked (a rebalance, Stop), their goroutines finish the record they are
// on, commit, and exit before the revoke completes (BlockRebalanceOnPoll,
// OnPartitionsRevoked), so the next owner starts right after the last
// processed record. Records processed but not yet committed at a crash are
// read again and acked by the inbox as duplicates.
//
// # Failures
//
// Kafka has no per-record nack, and skipping a record would break the
// partition's order. A failing record is retried in place, after
// Config.BackoffFunc(attempt), while its partition waits. With
// Config.DeadLetterTopic set, a record that failed Config.MaxAttempts times
// is produced there (key, value, headers, plus [ErrorHeader],
// [SourceHeader], [AttemptsHeader]) and the partition moves on. Without it,
// the record is retried until it succeeds or the subscriber stops — the
// safe default when records carry money; alert on the Warn logs.
//
// # Lifecycle
//
// [Subscriber.Start] creates the franz-go client (Config.ClientOpts for TLS,
// SASL, timeouts) and joins the group. [Subscriber.Stop] stops polling, lets
// each partition finish its current record and commit, leaves the group and
// closes the client; if its context ends first, running handlers are
// cancelled and their records stay uncommitted. A Subscriber runs once.
//
// # Guarantees
//
// What holds:
//   - A crash anywhere leaves either no trace (rolled back) or a committed
//     dedup row (the record read again is a Duplicate). Tested by SIGKILLing
//     a consumer process between the transaction commit and the offset
//     commit.
//   - No loss: an offset is never committed past a record that has not
//     committed (or been dead-lettered). Tested by a record that keeps
//     failing and a restart that resumes exactly at it.
//   - Per-partition order, including across rebalances (the revoke waits
//     for the record in flight).
//   - Kafka unreachable: polling retries; nothing is committed that was not
//     processed. Database unreachable: the partition retries with backoff.
//   - Clock jumps do not matter: positions are offsets; the inbox stamps rows
//     with database time.
//
// What does not:
//   - Order across partitions, or of events whose key changed partition.
//     Dedup is not ordering: use the inbox's version watermarks.
//   - A lost partition (session expired while a handler was slow) can be
//     processed by the new owner at the same time as the old one finishes:
//     the database's unique index still lets only one commit.
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
// same message twice in one poll, poison records to a dead-letter topic, a
// consumer killed between commit and offset commit, and 10,000 records (30%
// duplicates, 3% failures) through three group members stopped and replaced
// every ~150ms. kfake is not Kafka: broker failover, transactions and
// real-world rebalance timing are not exercised here.
package kafkainbox
