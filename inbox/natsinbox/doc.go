// Package natsinbox consumes a NATS JetStream pull consumer through an
// [inbox.Inbox], so that redeliveries execute once.
//
// JetStream delivers at least once: a consumer that crashes after doing the
// work but before its ack, an ack lost on the way, or an AckWait that runs
// out while a slow handler is still busy all bring the message back. A
// [Subscriber] turns every delivery into one [inbox.Inbox.Process] call: the
// dedup row and the handler's business writes commit in one database
// transaction, and only then is the message acked. A redelivery of a
// message that has committed is acked as a duplicate without running the
// handler.
//
//	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
//	sub, _ := natsinbox.New(ib, consumer, func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, …)
//		return err
//	}, nil)
//	_ = sub.Start(ctx)
//	defer sub.Stop(ctx)
//
// # Message IDs
//
// The dedup key is the business message ID, by default the Nats-Msg-Id
// header (the producer's publish-dedup ID, which JetStream only remembers for
// the stream's duplicate window; the inbox remembers it for its retention).
// Set Config.MessageIDFunc to read another header ([HeaderID]) or the
// payload. The ID must be the same on every retry of the same business
// action, or deduplication cannot work.
//
// A message without an ID is terminated (Term) and logged at Error: it cannot
// be deduplicated, so processing it could repeat its effect on every
// redelivery, and redelivering it cannot give it an ID. Terminating is a
// decision to make visible, so the server also emits its termination
// advisory; subscribe to $JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.> to alert.
//
// # Acknowledgement and failures
//
//   - Processed or Duplicate → Ack, always after the commit.
//   - Handler or database error → NakWithDelay(Config.BackoffFunc(n)), where
//     n is the delivery count from the message metadata. The transaction rolled
//     back, dedup row included, so the redelivery runs normally.
//   - Error on the Config.MaxDeliveries-th delivery → Term: a poison message
//     stops being redelivered. Keep the consumer's own MaxDeliver unlimited or
//     at least MaxDeliveries, or the server gives up first, silently.
//   - Error while stopping (the handler's context was cancelled) → Nak with no
//     delay, never Term: the message was not at fault.
//
// TermWithReason is used only when Config.TermWithReason is set, because
// servers before 2.10.4 ignore it and the message would stay pending. The
// reason is logged either way.
//
// # Lifecycle
//
// [Subscriber.Start] starts Config.Concurrency workers reading one
// Consumer.Messages iterator. [Subscriber.Stop] drains it: the messages
// already fetched are processed and acked, then the workers exit. If Stop's
// context ends first, handlers in flight are cancelled (their transactions
// roll back), their messages are naked, and the prefetched rest comes back
// after AckWait. A Subscriber runs once; create a new one to consume again.
// [Subscriber.Handle] is the per-message step, for callers that run their
// own Consume or Fetch loop.
//
// # Guarantees
//
// What holds:
//   - A crash anywhere (before the commit, between commit and ack, during the
//     ack) leaves either no trace (the transaction rolled back: the
//     redelivery runs the handler) or a committed dedup row (the redelivery is
//     acked as a duplicate). The effect happens once. This is tested by
//     SIGKILLing a consumer process between commit and ack.
//   - Concurrent deliveries of one ID (two subscribers, an AckWait expiry
//     under a slow handler) are decided by the database's unique index: one
//     commits, the others become duplicates.
//   - NATS unreachable: the iterator retries; nothing is acked that has not
//     committed. Database unreachable: Process fails, the message is naked
//     with backoff; after MaxDeliveries it is terminated, so size
//     MaxDeliveries × backoff to outlast the outages you expect.
//   - Clock jumps do not matter here: ordering and counts come from the
//     server's delivery metadata, and the inbox stamps rows with database time.
//
// What does not:
//   - Not a dedup window forever: once the inbox sweeper has deleted a row
//     (inbox retention), a redelivery of that ID runs again. Retention must
//     cover the broker's redelivery horizon.
//   - Not ordering: with Concurrency > 1 (or several subscribers) messages
//     are processed in parallel; redeliveries arrive out of order anyway. Use
//     the inbox's version watermarks for ordered application.
//   - Side effects outside the transaction (HTTP calls, e-mails) are not
//     covered: a failure after them repeats them. Write an outbox row in the
//     transaction instead.
//   - A handler that crashes the process every time (not returning an
//     error) is redelivered up to the consumer's MaxDeliver; set one on the
//     consumer as the last resort.
//
// # Testing
//
// The tests run against a real NATS server (IDEM_TEST_NATS), with the inbox
// on PostgreSQL: 100 concurrent copies of one message, failure then
// redelivery, poison termination, messages without ID, the same message
// twice in one fetched batch, a consumer process killed between commit and
// ack, and 10,000 messages (30% duplicates, 3% handler failures) through
// consumers that are stopped and replaced every ~100ms.
package natsinbox
