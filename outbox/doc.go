// Package outbox is the producer half of exactly-once effects between
// services: a message is written in the same database transaction as the
// business change that causes it, and a relay publishes it afterwards,
// marking it sent only once the broker has confirmed it. The consumer's
// inbox (package inbox) drops the repeats a relay may make, so outbox →
// broker → inbox.Process gives one effect per committed message.
//
//	ob, _ := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres})
//	_ = ob.Migrate(ctx)
//
//	tx, _ := db.BeginTx(ctx, nil)
//	// … UPDATE orders SET status = 'PAID' …
//	_ = ob.Enqueue(ctx, tx, outbox.Message{ID: "order-42/paid", Destination: "ORDERS.paid",
//		OrderingKey: "order-42", Payload: body})
//	_ = tx.Commit()
//
//	relay, _ := ob.NewRelay(publisher, nil) // natsoutbox, amqpoutbox, kafkaoutbox
//	_ = relay.Start(ctx)
//	defer relay.Stop(ctx)
//
// The publishers live in their own modules, so this package needs nothing
// but database/sql: natsoutbox (JetStream, Nats-Msg-Id), amqpoutbox
// (RabbitMQ with publisher confirms, message-id) and kafkaoutbox (franz-go's
// idempotent producer, the ordering key as record key, the ID in the
// idem-message-id header). Each writes the ID where the matching inbox
// adapter reads it by default. docs/outbox.md has the whole story.
//
// # The message
//
// A Message has an ID (the dedup key downstream: derive it from the
// business action, so a retried transaction enqueues the same ID; a second
// Enqueue of one ID fails with ErrDuplicateID), a Destination in the
// publisher's terms, an optional OrderingKey, a payload and headers.
//
// # Order
//
// Messages with one OrderingKey are published in commit order, one at a
// time: a message is claimed only once every earlier message of its key is
// sent (or discarded by an operator). Enqueue takes the key's row in the
// table <Table>_keys in the caller's transaction, so two transactions with
// one key take turns, and the sequence number it hands out follows commit
// order with no gaps. Messages without a key are not ordered.
//
// Each key's head (its one message that may go next) is kept, not
// searched for: a flag on the message, set by Enqueue when nothing
// earlier of its key is open and moved on to the key's next message by
// the relay in the transaction that marks the head sent (a parked head
// stays the head; an operator's Discard moves it on at the next pass).
// The claim reads an index of heads only, so a claim costs the same
// behind 100,000 pending messages of one key as behind one, whatever the
// planner's statistics say: tested on PostgreSQL with 100,000 messages
// behind one failing head and statistics taken with them in the table,
// 2,000 messages of 20 other keys published in about a second (before:
// 220 in 60 s). The relay moves a key's head on under the key's row lock,
// which it takes with SKIP LOCKED: it never waits for a business
// transaction, and a key one holds is moved on by a later pass. On
// PostgreSQL, a business transaction at REPEATABLE READ or SERIALIZABLE
// that enqueues for a key whose head a relay moved on since the
// transaction's snapshot fails with a serialization error (SQLSTATE
// 40001), as it would against another transaction enqueueing for that
// key: retry it.
//
// The flag is a column of the claimed row itself, which a locking read
// sees in its latest committed version, so the rule does not rest on a
// dialect's snapshot rules. (On InnoDB a locking read sees rows committed
// during the statement while a subquery reads the statement's older
// snapshot: a claim that searched for heads with a subquery could return
// a key's first and second message.) Tested on the three dialects with
// transactions that enqueue three messages of one key, three relays at
// Concurrency 4: no batch with two messages of a key, no message handed
// over before its predecessor was confirmed.
//
// One key moves one message per pass (its next message becomes the head
// when the pass commits): about 95–140 messages a second on PostgreSQL
// with a publisher that confirms at once, against 3,300–7,400 over 1,000
// keys, on a loaded shared machine (BENCHMARKS.md, BenchmarkRelayKeys).
// A key is a sequence, not a queue to scale: give a hot aggregate's
// independent streams keys of their own.
//
// Upgrading to migration 002 (the head flag): stop the relays, migrate,
// and run the new version everywhere that enqueues or relays; a process
// of an older version that enqueues after the migration writes messages
// that are never a head.
//
// # Several relays
//
// On PostgreSQL and on MySQL 8 / MariaDB 10.6+ a relay claims a batch with
// SELECT … FOR UPDATE SKIP LOCKED in a READ COMMITTED transaction, holds
// the row locks while it publishes, and records the outcomes in the same
// transaction: relays share the work without waiting for each other, and a
// relay that dies releases its claim with its connection. SQLite has no
// SKIP LOCKED: one relay at a time holds a lease row (RelayConfig.Lease,
// renewed on every pass), the others get ErrNotLeader from RunOnce (a
// started relay just waits), and a dead holder is replaced once its lease
// has run out. A relay holds one database connection for the length of a
// pass.
//
// A relay whose host vanishes (power lost, network cut) sends no close:
// the server would keep its session, idle in the claim transaction and
// holding the claimed rows, until TCP keepalive gives up (two hours by
// default on Linux) or MariaDB's wait_timeout (eight hours). So the claim
// transaction is bounded on the server: idle for PassTimeout, it is ended
// and its rows go to the other relays (PostgreSQL: SET LOCAL
// idle_in_transaction_session_timeout; MariaDB: idle_transaction_timeout,
// set on the pass's connection and reset before it returns to the pool;
// MySQL 8 has no such setting). No live pass is idle that long, since
// PassTimeout bounds the whole pass. Tested with a relay SIGKILLed behind a
// forwarder that never passes its close on: a second relay publishes its
// 500 messages within PassTimeout plus a few seconds. Also enable TCP
// keepalives that give up within minutes on the database server
// (tcp_keepalives_idle and friends on PostgreSQL) or the host, for the
// connections that are not in a claim.
//
// One relay runs RelayConfig.Concurrency passes at once (default 2, each
// in its own transaction): while one waits for the broker's confirms, the
// next claims the following heads and publishes them. SKIP LOCKED keeps
// them apart as it keeps relays apart, and a message is claimed only once
// its key's predecessor is marked sent, so per-key order is the same. A
// pass marks its whole confirmed batch sent with one UPDATE. On SQLite
// Concurrency is always 1.
//
// # Under each fault
//
//   - Relay crash (SIGKILL) after the broker confirmed, before the mark:
//     the claim's transaction dies with the process, the messages are
//     pending again and the next relay publishes them again, with the same
//     ID. JetStream drops the repeat within its duplicate window and
//     Kafka's idempotent producer drops its own retries; in every case the
//     consumer's inbox drops it, so each message has one effect. Tested
//     with relay processes SIGKILLed at exactly that point, two at a time,
//     on PostgreSQL and MariaDB, over 3,000 messages; set
//     IDEM_OUTBOX_STORM=10000 (a number of messages) for a larger storm.
//   - Relay crash before the publish: nothing was sent; the message is
//     pending and published by the next pass.
//   - Broker away: every publish fails, at PublishTimeout at the latest
//     (the three publishers give up then even on a link that accepts and
//     never answers); each message's next attempt is pushed back
//     (MinBackoff·2ⁿ up to MaxBackoff, counted by Observer.Retried), and a
//     pass in which every publish failed makes the relay itself wait the
//     same way: no spinning. Nothing is lost: the rows stay pending until
//     confirmed; a copy the client still delivers after giving up is
//     published again later and dropped by the inbox. Tested for 3 s on
//     each broker while messages keep coming: a private nats-server
//     killed, the link to RabbitMQ black-holed through a fault proxy,
//     kfake closing every connection.
//   - Database away: a pass fails at PassTimeout at the latest and the
//     relay backs off; business transactions fail as they would without
//     the outbox. A batch published just before the cut may be published
//     again (its mark was lost): the inbox absorbs it. Tested by
//     black-holing the relay's link to PostgreSQL for 3 s.
//   - A message the broker refuses for good (too large, unroutable: the
//     publisher wraps the error with Permanent or PermanentAs) is parked
//     with the reason and its class (ReasonClass: too_large,
//     invalid_destination, no_route, missing_exchange, …; Observer.Parked,
//     counted by class in promidem and otelidem). Each publisher's
//     documentation says which refusals of its broker are parked and
//     which are retried. A parked message holds back the later messages
//     of its own key — publishing them would break the order — and
//     nothing else. Parked, Requeue and Discard are the operator's tools.
//     What a publisher can see in the message alone is refused at Enqueue
//     instead, through Config.CheckFunc (natsoutbox.Check).
//   - Clock: every time (enqueued, next attempt, finished, lease) is the
//     database's clock, never a process's.
//
// What is not promised: a broker may deliver a message more than once
// (deduplicate with the inbox, always); the lag between commit and
// publish is bounded only by the relay's health; an order across
// different keys.
//
// # Retention
//
// Sent and discarded rows are deleted by the relay's sweeper once they
// are RelayConfig.Retention old (default 7 days), in batches through the
// index on the finishing time; pending and parked rows are never deleted.
// Keep the retention longer than the window in which a business retry
// could enqueue the same ID again, or the retry enqueues it a second time.
// The <Table>_keys rows (one per ordering key) are kept.
//
// # Metrics
//
// RelayConfig.Observer receives Published, Retried, Parked and Lag (the
// age of the oldest pending message, by the database clock); a
// BacklogObserver also receives Backlog, the number of pending messages
// with that age, for an alert on a relay that has stopped publishing
// (promidem and otelidem have one). The relay logs one warning when
// publishing starts failing and one line when it recovers.
package outbox
