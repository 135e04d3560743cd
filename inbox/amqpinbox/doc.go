// Package amqpinbox consumes a RabbitMQ queue through an [inbox.Inbox], so
// that redeliveries execute once, an outage is waited out instead of
// spending a message's retries, and poison goes to a dead-letter exchange
// or queue instead of being dropped.
//
// RabbitMQ redelivers every unacked delivery when a consumer's channel or
// connection closes: a consumer that crashed after doing the work but before
// its ack brings the message back, and so do producers that retry a publish
// after a lost confirm. A [Subscriber] turns every delivery into one
// [inbox.Inbox.Process] call (dedup row and business writes in one database
// transaction) and acks manually, only after the commit. A redelivery of a
// committed message is acked as a duplicate without running the handler.
//
//	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
//	sub, _ := amqpinbox.New(ib, conn, func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO shipments …`)
//		return err
//	}, &amqpinbox.Config{Queue: "shipping"}) // poison → queue "shipping.dead-letter"
//	_ = sub.Start(ctx)
//	defer sub.Stop(ctx)
//
// # Message IDs
//
// The dedup key is the AMQP MessageId property, or what Config.MessageIDFunc
// returns (a header, a field of the body). Producers must set it to the
// business ID and keep it on every retry. A delivery without an ID is
// dead-lettered (see below) and logged at Error: it cannot be deduplicated,
// and redelivering it cannot give it one. An error from MessageIDFunc is a
// failed attempt like a handler error; the subscriber never falls back to
// another key.
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
// A handler that panics fails its message like an error (the panic is
// recovered, its value and the start of its stack are the error, and the
// transaction is rolled back): the process goes on.
//
// The handler's error is its verdict on the message (see [inbox.Permanent]):
//
//   - nil: done. Processed or Duplicate → Ack, after the commit.
//   - an infrastructure failure ([inbox.IsTransient]: the database or Redis
//     unreachable, a connection reset, a deadlock, a serialization failure,
//     a lock timeout, a statement the server cancelled — statement_timeout
//     behind a migration's LOCK TABLE, KILL QUERY), or
//     Config.ProcessTimeout expired (a black-holed connection answers
//     nothing): not the message's fault. Only errors idem can recognise as
//     infrastructure count (a driver's, a network operation's, the inbox's
//     own statements'): an io.EOF or io.ErrUnexpectedEOF from decoding the
//     payload (encoding/json on an empty or truncated body) is an ordinary
//     failure, so a malformed message ends as poison. The worker keeps
//     the delivery, unacked, and retries it in place with
//     Config.TransientBackoffFunc (100ms doubling to 5s) for as long as the
//     failure lasts. This never spends the poison budget.
//   - an error wrapping inbox.ErrNotYet (the message came before the one it
//     depends on, e.g. watermark.ErrGap, and Process already waited a
//     little): a copy goes to the back of the queue after
//     Config.TransientBackoffFunc's wait (through Config.RetryQueue, below)
//     and the original is acked, so that its predecessor (which may be
//     right behind it) gets its turn; a requeue would put it back in front.
//     Never counted.
//   - inbox.Permanent(err): dead-lettered now, no further attempts.
//   - any other error: the transaction rolled back (dedup row included);
//     after the n-th failure a copy waits Config.BackoffFunc(n) in
//     Config.RetryQueue and then goes back to the tail of the queue; the
//     original is acked once the copy is confirmed. The worker moves on at
//     once, so a failing message never stalls the queue behind it, also at
//     Concurrency 1. (RabbitMQ has no delayed requeue: the retry queue's
//     messages expire, per-message TTL, into the default exchange with the
//     queue's name as routing key. It expires messages only at its head, so
//     a copy may wait as long as the longest backoff in front of it.) On
//     the Config.MaxFailures-th failure the message is poison and is
//     dead-lettered.
//   - the handler's context cancelled because the subscriber is stopping →
//     immediate requeue, never counted; likewise an infrastructure failure
//     after Stop was called (see Lifecycle).
//
// The failure count is kept in the subscriber's memory, per message ID (per
// content for a delivery whose ID cannot be read). It is never read from a
// header: any producer can set a header (a forged
// Idem-Failures or x-delivery-count would otherwise dead-letter a valid
// message at once, or give a poison one endless retries). A restarted
// subscriber starts counting again.
//
// # Dead letters
//
// Poison, in order of preference:
//
//   - Config.DeadLetterExchange: published there (routing key
//     Config.DeadLetterRoutingKey, default the original's), mandatory and
//     confirmed, with [ErrorHeader] ("Idem-Error", at most 1 KiB),
//     [FailuresHeader] ("Idem-Failures") and [QueueHeader] ("Idem-Queue")
//     added to the original headers and properties (replacing any of the
//     same name); then the original is acked. This is the whole envelope:
//     the body and every property are the original's.
//   - otherwise a dead-letter queue the subscriber declares at Start
//     (durable; Config.DeadLetterQueue, default Queue + ".dead-letter"),
//     published to the same way through the default exchange.
//   - Config.RejectToQueueDLX: rejected without requeue, for a queue whose
//     own x-dead-letter-exchange takes it (argument or policy). Only then:
//     without one, the broker drops a rejected message.
//
// If the dead-letter publish fails (unroutable, nacked, no confirm, the
// channel lost), the delivery is requeued after its backoff and tried again
// later: it is never acked without having been stored elsewhere.
//
// # Channels
//
// The subscriber consumes on one channel and publishes dead letters on a
// second one, in confirm mode. A channel exception on the publishing
// channel (publishing to an exchange that was deleted, say) closes it; the
// next publish notices and reopens it. If it cannot be reopened (the
// connection is gone), the subscriber ends: [Subscriber.Done] is closed
// and [Subscriber.Err] says why ([ErrChannelClosed]), as when the broker
// closes the consuming channel or the connection. The subscriber does not
// reconnect: create a new one on a new connection.
//
// # Metrics
//
// [Subscriber.Stats] (an [inbox.DeliveryStats], the same for every broker
// adapter) counts processed, duplicate, retried and dead-lettered
// messages and the parked ones, and Config.Observer (an [inbox.Observer]) is told
// each one; promidem.NewInboxObserver makes them the Prometheus counter
// idem_inbox_messages_total{adapter="amqp", consumer, outcome}.
//
// # Lifecycle
//
// [Subscriber.Start] opens the channels (manual acks, QoS Prefetch),
// declares the retry queue and the dead-letter queue when it uses them, and starts
// Config.Concurrency workers. [Subscriber.Stop] cancels the consumer, lets
// the workers finish the deliveries already prefetched, and closes the
// channels; if its context ends first, handlers in flight are cancelled
// and their deliveries requeued. A Subscriber runs once.
//
// The Stop bound: once Stop is called, no delivery is held for an in-place
// retry or a backoff; the first infrastructure failure after that
// requeues its delivery, and the rest of the prefetched deliveries are
// requeued without an attempt. During a database outage
// Stop(context.Background()) thus returns after about two
// Config.ProcessTimeouts at most, not when the outage ends (tested with the
// database refused). Give Stop a context with a deadline for a hard bound.
//
// # Guarantees
//
// What holds:
//   - Database outage: deliveries wait with their workers, none is
//     dead-lettered, dropped or spends its retries, and each has one effect
//     once the database is back. Tested with PostgreSQL black-holed for
//     60 s while messages (and repeats) arrive.
//   - Consumer SIGKILL anywhere leaves either no trace or a committed dedup
//     row; the broker redelivers the unacked delivery and the inbox acks it
//     as a duplicate. Tested by SIGKILLing a consumer process between
//     commit and ack.
//   - Connection closed by the broker (rabbitmqctl close_connection, a
//     broker restart, a network cut): the subscriber ends and reports it in
//     Err; the unacked deliveries are redelivered to the next subscriber,
//     and one committed before the close is acked there as a duplicate.
//     Tested with rabbitmqctl close_connection under a handler in flight.
//   - Publishing channel lost: reopened, the poison message kept until it is
//     dead-lettered. Tested by deleting the dead-letter exchange under a
//     running subscriber (a real 404 channel exception) and re-creating it.
//   - Concurrent deliveries of one ID (several consumers, a requeue racing
//     a slow handler) are decided by the database's unique index.
//   - Clock jumps do not matter: the inbox stamps rows with database time.
//
// What does not:
//   - Order: requeues and redeliveries come back in any order; so do
//     concurrent workers. Use the inbox's version watermarks.
//   - Broker restarts are not waited out: the subscriber ends (Err) and the
//     application must reconnect and start a new one. Not tested against a
//     restarted RabbitMQ (the shared server is never restarted); the
//     close_connection test produces the same client-side event.
//   - The poison budget restarts with the process (the count is in memory),
//     and is per subscriber process: a poison message gets up to
//     Config.MaxFailures attempts in each process it reaches.
//   - A delivery held through a long outage stays unacked: RabbitMQ's
//     consumer_timeout (30 minutes by default) closes the channel of a
//     consumer that holds one longer; the subscriber then ends with Err and
//     the delivery goes back to the queue. Raise consumer_timeout above the
//     outages you want to ride out.
//   - Quorum queues count requeues in their own delivery-limit (20 by
//     default in RabbitMQ 4) and drop or dead-letter past it: set it above
//     MaxFailures plus the restarts you expect, or to -1.
//   - Dedup beyond the inbox retention window; side effects outside the
//     transaction.
//
// # Testing
//
// The tests run against a real RabbitMQ (IDEM_TEST_AMQP) with the inbox on
// PostgreSQL: 100 concurrent copies of one message, failure then requeue,
// poison to a dead-letter exchange and to the declared dead-letter queue,
// inbox.Permanent, forged delivery-count headers, a delivery without ID
// rejected to the queue's own DLX, the same message twice in one prefetch
// window, a 60 s database outage through a fault proxy, the publishing
// channel killed by a channel exception, the connection closed by the
// broker, a consumer process killed between commit and ack, and 10,000
// messages (30% duplicates, 3% failures) through subscribers stopped and
// replaced every ~100ms.
package amqpinbox
