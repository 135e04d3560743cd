// Package amqpinbox consumes a RabbitMQ queue through an [inbox.Inbox], so
// that redeliveries execute once.
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
//	}, &amqpinbox.Config{Queue: "shipping"})
//	_ = sub.Start(ctx)
//	defer sub.Stop(ctx)
//
// # Message IDs
//
// The dedup key is the AMQP MessageId property, or what Config.MessageIDFunc
// returns (a header, a field of the body). Producers must set it to the
// business ID and keep it on every retry. A delivery without an ID is
// dead-lettered (see below) and logged at Error: it cannot be deduplicated,
// and redelivering it cannot give it one.
//
// # Failures, retries and dead letters
//
// Classic queues only say Redelivered (a bool), and a requeued message gets
// no delay, so the subscriber counts failures itself, in the
// x-idem-deliveries header ([DeliveriesHeader]):
//
//   - Processed or Duplicate → Ack, after the commit.
//   - Error, failure n < Config.MaxDeliveries → the worker holds the delivery
//     for Config.BackoffFunc(n), publishes a copy carrying
//     x-idem-deliveries = n to the queue (default exchange, confirmed), then
//     acks the original. The copy goes to the back of the queue. A crash
//     between the publish and the ack leaves two copies with one ID: the
//     inbox makes the second a Duplicate. If the publish fails, the delivery
//     is nacked with requeue instead (not counted).
//   - Error on failure MaxDeliveries → dead letter: with
//     Config.DeadLetterExchange, a copy with [ErrorHeader] and the count is
//     published there (mandatory and confirmed; an unroutable publish counts
//     as failed) before the original is acked; without it, the delivery is
//     rejected without requeue, so the queue's own x-dead-letter-exchange
//     receives it — and a queue without one drops it. Configure one of the
//     two.
//   - Error while stopping (the handler's context was cancelled) → Nack
//     with requeue, not counted.
//
// Decision: one mechanism for classic and quorum queues. Quorum queues also
// keep x-delivery-count and can enforce x-delivery-limit; since retries are
// new publishes, that count stays low, but it still catches what this
// package cannot count: a process that crashes inside the handler every
// time. On quorum queues, set x-delivery-limit as that last resort.
//
// # Lifecycle
//
// [Subscriber.Start] opens two channels on the connection (one consuming
// with QoS Config.Prefetch, one publishing in confirm mode) and starts
// Config.Concurrency workers. [Subscriber.Stop] cancels the consumer, lets
// the workers finish the prefetched deliveries, and closes the channels; if
// its context ends first, running handlers are cancelled and their
// deliveries requeued. If the connection or channel dies, the subscriber
// ends by itself: [Subscriber.Done] is closed and [Subscriber.Err] says why;
// create a new Subscriber (on a new connection) to resume. Reconnecting is
// deliberately left to the caller. A Subscriber runs once.
//
// # Guarantees
//
// What holds:
//   - A crash anywhere leaves either no trace (rolled back: the redelivery
//     runs) or a committed dedup row (the redelivery is acked as a duplicate).
//     Tested by SIGKILLing a consumer process between commit and ack.
//   - Concurrent deliveries of one ID, on one or many consumers, are decided
//     by the database's unique index.
//   - RabbitMQ unreachable: the subscriber ends; nothing is acked that has not
//     committed. Database unreachable: deliveries fail and are retried with
//     backoff, then dead-lettered after MaxDeliveries (size it for your
//     outages).
//   - Clock jumps: nothing here reads the clock except the backoff timer; the
//     inbox stamps rows with database time.
//
// What does not:
//   - Order: retries go to the back of the queue, and Concurrency > 1
//     processes in parallel. Use the inbox's version watermarks.
//   - Dedup beyond the inbox retention window.
//   - Side effects outside the transaction (calls, e-mails): use an outbox.
//   - A retry copy loses the broker's per-message TTL clock and Redelivered
//     flag; it keeps every property and header of the original.
//
// # Testing
//
// The tests run against a real RabbitMQ (IDEM_TEST_AMQP) with the inbox on
// PostgreSQL: 100 concurrent copies of one message, failure then retry,
// poison dead-lettering (own exchange and the queue's DLX), the same message
// twice in one prefetch window, a consumer process killed between commit and
// ack, a lost connection, and 10,000 messages (30% duplicates, 3% failures)
// through consumers stopped and replaced every ~100ms.
package amqpinbox
