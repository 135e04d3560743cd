// Package natsinbox consumes a NATS JetStream pull consumer through an
// [inbox.Inbox], so that redeliveries execute once, an outage is waited
// out instead of spending a message's retries, and poison goes to a
// dead-letter subject instead of disappearing.
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
//	}, &natsinbox.Config{DeadLetterSubject: "PAYMENTS_DLQ.billing", JetStream: js})
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
// action, or deduplication cannot work. A message without an ID cannot be
// deduplicated, so it is dead-lettered without running the handler. An
// error from MessageIDFunc is a failed attempt like a handler error; the
// subscriber never falls back to another key.
//
// A handler that panics fails its message like an error (the panic is
// recovered, its value and the start of its stack are the error, and the
// transaction is rolled back): the process goes on.
//
// The dedup rows are scoped by Config.Consumer, by default
// "<stream>/<consumer>": a durable consumer's name is unique only within its
// stream, and two streams with a durable "worker" each must not share one
// inbox scope (their equal Nats-Msg-Ids would collide).
//
// # Verdicts
//
// natsinbox, amqpinbox and kafkainbox decide alike: one engine (the
// module's internal adapter package) turns each attempt's error into what
// becomes of the message, with the same Config names (MaxFailures,
// BackoffFunc, TransientBackoffFunc, ProcessTimeout, MaxParked, Observer,
// Logger) and the same counts ([inbox.DeliveryStats]); each adapter only
// says how its broker is told. A table in the driver tests
// (internal/drivertest/inboxengine) runs the same cases through all three.
//
// The handler's error is its verdict on the message (see [inbox.Permanent]):
//
//   - nil: done. Processed or Duplicate → Ack, always after the commit.
//   - an infrastructure failure ([inbox.IsTransient]: the database or Redis
//     unreachable, a connection reset, a deadlock, a serialization failure,
//     a lock timeout, a statement the server cancelled — statement_timeout
//     behind a migration's LOCK TABLE, KILL QUERY), or
//     Config.ProcessTimeout expired: not the message's fault. Only errors
//     idem can recognise as infrastructure count (a driver's, a network
//     operation's, the inbox's own statements'): an io.EOF or
//     io.ErrUnexpectedEOF from decoding the payload (encoding/json on an
//     empty or truncated body) is an ordinary failure, so a malformed
//     message ends as poison instead of holding the consumer. The subscriber keeps the message and retries it in place with
//     Config.TransientBackoffFunc (100ms doubling to 5s), reporting it
//     InProgress every third of AckWait so the server does not hand it to
//     someone else, for as long as the failure lasts. This never spends
//     the poison budget.
//   - an error wrapping inbox.ErrNotYet (the message came before the one it
//     depends on, e.g. watermark.ErrGap, and Process already waited a
//     little): NakWithDelay(Config.TransientBackoffFunc(n)) on its n-th early arrival at this subscriber, so
//     that its predecessor (which may be right behind it) gets its turn.
//     Never counted, never dead-lettered.
//   - inbox.Permanent(err): dead-lettered now, no further attempts.
//   - any other error: the transaction rolled back (dedup row included);
//     NakWithDelay(Config.BackoffFunc(n)) after the n-th failure, and on the
//     Config.MaxFailures-th failure the message is poison and is
//     dead-lettered.
//   - the handler's context cancelled because the subscriber is stopping →
//     Nak with no delay: never counted, never dead-lettered. An
//     infrastructure failure after Stop was called is naked at once too
//     (see Lifecycle).
//
// The failure count is kept in the subscriber's memory per stream sequence,
// not taken from the delivery's NumDelivered: that number also grows when
// AckWait runs out while a message waits in the client's buffer (behind
// messages held through an outage, say), which is not a failure of the
// message. A restarted subscriber starts counting again.
//
// # Dead letters
//
// With Config.DeadLetterSubject (and Config.JetStream to publish with), a
// poison message is published there through JetStream in this envelope:
//
//   - the data, unchanged;
//   - the original's headers, except that every publish-control header
//     (a name starting with "Nats-": Nats-Msg-Id, Nats-Expected-Stream,
//     Nats-Rollup, Nats-TTL, …) travels as [OriginalHeaderPrefix] + the
//     rest of its name (Idem-Original-Msg-Id, Idem-Original-Rollup), so
//     that none of them steers the copy's publish;
//   - [ErrorHeader] (the reason, at most 1 KiB), [FailuresHeader],
//     [DeliveriesHeader], [StreamHeader], [SequenceHeader],
//     [SubjectHeader], [ConsumerHeader] (the JetStream consumer) and
//     [TimestampHeader], replacing any of the same name;
//   - Nats-Msg-Id [DeadLetterID]: "idem-dl/<stream>/<consumer>/<sequence>",
//     the copy's own dedup ID. Two consumers that dead-letter the same
//     message keep a copy each; the same consumer dead-lettering it again
//     (its Term was lost) is dropped by the dead-letter stream's duplicate
//     window.
//
// The original is terminated (Term, or TermWithReason with
// Config.TermWithReason on servers >= 2.10.4) only once the copy is known
// to be stored: the publish is acknowledged, or acknowledged as a
// Duplicate and the stream still holds the first copy under that ID (it
// is read back by sequence). Otherwise — no stream captures the subject,
// the publish fails, the first copy was purged while the duplicate window
// remembers its ID — the original is naked with its backoff and tried
// again later. The layouts tested on a real server: the dead-letter
// subject inside the source stream (with a filtered consumer), one
// dead-letter stream with a subject per consumer, originals carrying
// Nats-Rollup and Nats-Expected-Stream.
//
// Without a DeadLetterSubject nothing is ever terminated: a poison message
// is naked with its backoff (at most one minute by default) again and
// again, logged at Error: it stays in the stream, visible, never in a hot
// loop.
//
// Keep the JetStream consumer's own MaxDeliver unlimited (-1): the server
// drops a message silently when it reaches MaxDeliver, and an outage or
// AckWait expiries can get it there.
//
// # Metrics
//
// [Subscriber.Stats] (an [inbox.DeliveryStats], the same for every broker
// adapter) counts processed, duplicate, retried and dead-lettered
// messages and the parked ones, and Config.Observer (an [inbox.Observer]) is told
// each one; promidem.NewInboxObserver makes them the Prometheus counter
// idem_inbox_messages_total{adapter="nats", consumer, outcome}. Alert on dead_lettered, and on retried growing while
// processed does not.
//
// # Lifecycle
//
// [Subscriber.Start] starts Config.Concurrency workers reading one
// Consumer.Messages iterator. [Subscriber.Stop] drains it: the messages
// already fetched are processed and acked, then the workers exit. If Stop's
// context ends first, handlers in flight are cancelled (their transactions
// roll back), their messages are naked, and the prefetched rest comes back
// after AckWait. A Subscriber runs once; create a new one to consume again.
//
// The Stop bound: once Stop is called, no message is held for an in-place
// retry; the first infrastructure failure after that naks its message,
// and the rest of the buffer is naked without an attempt. During a
// database outage Stop(context.Background()) thus returns after about two
// Config.ProcessTimeouts at most, not when the outage ends (tested with the
// database refused). Give Stop a context with a deadline for a hard bound.
// [Subscriber.Handle] is the per-message step, for callers that run their
// own Consume or Fetch loop; it returns what became of the message as an
// [inbox.Action] (Acked, AckedDuplicate, HandedBack for a Nak, DeadLettered,
// Parked).
//
// # Guarantees
//
// What holds:
//   - Database outage: messages wait, none is terminated, dead-lettered or
//     lost, and each has one effect once the database is back. Tested with
//     PostgreSQL refused for 60 s while messages (and repeats) arrive, with
//     the default retry settings and an AckWait of 5 s.
//   - Consumer SIGKILL anywhere (before the commit, between commit and ack,
//     during the ack) leaves either no trace (the transaction rolled back:
//     the redelivery runs the handler) or a committed dedup row (the
//     redelivery is acked as a duplicate). Tested by SIGKILLing a consumer
//     process between commit and ack.
//   - Broker restart: the client reconnects and the iterator resumes; acks
//     lost in the crash come back as redeliveries, acked as duplicates.
//     Tested by SIGKILLing a private nats-server (file storage) in the
//     middle of consumption and restarting it.
//   - Concurrent deliveries of one ID (two subscribers, an AckWait expiry
//     under a slow handler) are decided by the database's unique index: one
//     commits, the others become duplicates.
//   - Clock jumps do not matter here: the inbox stamps rows with database
//     time; backoffs are durations.
//
// What does not:
//   - A stream on memory storage loses its messages when the server dies;
//     that is the stream's choice, not the subscriber's.
//   - Not a dedup window forever: once the inbox sweeper has deleted a row
//     (inbox retention), a redelivery of that ID runs again. Retention must
//     cover the broker's redelivery horizon.
//   - Not ordering: with Concurrency > 1 (or several subscribers) messages
//     are processed in parallel; redeliveries arrive out of order anyway. Use
//     the inbox's version watermarks for ordered application.
//   - The poison budget restarts with the process (the count is in memory):
//     a poison message gets Config.MaxFailures attempts per subscriber
//     process that sees it.
//   - During an outage each worker holds one message; messages behind it
//     wait in the client's buffer and may be redelivered when their AckWait
//     runs out (duplicates, acked as such: no effect twice).
//   - Side effects outside the transaction (HTTP calls, e-mails) are not
//     covered: a failure after them repeats them. Write an outbox row in the
//     transaction instead.
//   - A handler that crashes the process every time (rather than returning
//     an error) is redelivered forever; it never reaches the dead-letter
//     subject.
//
// # Testing
//
// The tests run against a real NATS server (IDEM_TEST_NATS) and a private
// nats-server for the broker crash, with the inbox on PostgreSQL: 100
// concurrent copies of one message, failure then redelivery, poison to a
// dead-letter stream (headers checked), inbox.Permanent, poison kept
// without a dead-letter subject, messages without ID, the same message
// twice in one fetched batch, a 60 s database outage through a fault
// proxy, a consumer process killed between commit and ack, the broker
// killed and restarted, and 10,000 messages (30% duplicates, 3% handler
// failures) through consumers that are stopped and replaced every ~100ms.
package natsinbox
