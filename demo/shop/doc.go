// Package shop is idem's case study (docs/case-study.md), built small but real: an order
// service that defends every step of an order against duplicates with the
// idem packages, a simulated payment channel that misbehaves on purpose, a
// reconciler, and the storm that `idem demo` drives through all of it.
//
// It is an example to read, and the product's demonstration: every layer is
// the real package on a real database, broker and HTTP connection; nothing
// is simulated except the payment channel (its own HTTP server) and the
// faults the storm injects. The walk-through is docs/case-study.md.
//
// It is a module of its own (github.com/idemkit/idem/demo/shop), outside
// cmd/idem, so that the layout shows what is product and what is
// demonstration: cmd/idem holds the commands, and its demo.go wires this
// package in for `idem demo`. The shop is not API: its exported names serve
// the binary and may change in any release (docs/stability.md).
//
// # Sections
//
//   - The order flow: each step's duplicate risk and its defence.
//   - The payment request, as steps.
//   - The payment channel.
//   - Reconciliation.
//   - Backends.
//   - The storm and its invariants.
//   - The anti-patterns.
//
// # The order flow
//
//	step            duplicate risk               defence
//	place order     double click, resend         form token (onetime/formtoken) or Idempotency-Key (httpidem
//	                                             over tiered: fast store, then sqlstore); INSERT … ON CONFLICT
//	                                             on the client's request_id, the backstop for any client
//	stock           two orders of one SKU        lock (lock.Locker) with a fence (lock.FencedTable) and
//	                                             CHECK (qty >= 0): correct even when the lock is lost or down
//	pay             cashier opened twice,        Idempotency-Key (httpidem), the request run as steps (package
//	                failure after the charge     step): fsm CREATED -> PAYING, the charge keyed by the step's
//	                                             derived key, the payment recorded; a retry resumes
//	callback        channel resends N times      HMAC signature; amount checked, a suspicious callback verified
//	                                             with the channel's query API; unique trade_no; fsm PAYING ->
//	                                             PAID; outbox.Enqueue in the same transaction; "success"
//	publish         relay killed, then again     package outbox's relay marks a message sent after the
//	                                             broker's confirm; a relay killed before the mark publishes
//	                                             again, with the same message ID
//	ship            the broker redelivers        inbox dedup row in the same transaction as fsm PAID -> SHIPPED
//	refund          replays, compensation        unique refund_no + UPDATE … WHERE refunded + amount <= paid
//
// # The payment request, as steps
//
// POST /orders/{id}/pay runs behind the Idempotency-Key middleware (the
// client sends one key per order) as three steps of the request's key
// (package step), each with its recovery point:
//
//	order   local    fsm CREATED -> PAYING, the operation's key written on the order, and the
//	                 recovery point, in one transaction (Step.SaveWith with Config.Durable's StepTx)
//	charge  foreign  the channel charges, with the step's derived key as its Idempotency-Key
//	record  local    the payment (unique trade_no), PAYING -> PAID and the outbox row that
//	                 ships the order, with the recovery point, in one transaction
//
// A request that fails between them (the storm drops its connection after
// the channel charged, or fails it before the record) is released by the
// middleware, and the client's retry with the same key resumes at the
// first unfinished step: a finished charge is not sent again, and one whose
// recovery point was never saved is sent again with the same derived key,
// which the channel answers with the first trade. A Duplicate of the order
// step under another key (a second device) is refused with 409: that
// operation charges, not this one.
//
// The payment is recorded twice over, and both records are honest: the
// request records the channel's own synchronous answer (signed, checked
// against the order's amount, as the callback is), so a paid order does not
// wait for a callback that may never come; the callback still arrives,
// with its signature, amount check and unique trade_no, and finds the
// payment recorded (or records it first, when it wins the race: the
// record step then inserts nothing). Both write through recordPayment, so
// the unique trade_no and the state machine decide, whichever comes first.
// The outbox row commits in the record's transaction rather than as a
// fourth step: the message must be published if and only if the payment
// commits.
//
// With Records keeping its claims outside the shop's database (the
// redis-down-rejects shop), a local step's recovery point is saved after
// its transaction commits; the operation's key on the order and the unique
// trade_no make a rerun of either local step harmless.
//
// # The payment channel
//
// Channel is its own HTTP server with a ledger, a trade query API and a refund
// API. It deduplicates charges by the Idempotency-Key the merchant sends, as
// a card provider's API does (a charge without a key, or with a new one, is a
// new charge), answers each with the trade signed, signs every callback with HMAC-SHA256, and sends them out of order,
// several times, sometimes never; it adds forged callbacks (bad signature),
// tampered ones (amount changed after signing) and suspicious ones (signed,
// wrong amount), which the shop must refuse or verify.
//
// # Reconciliation
//
// Reconcile compares the shop's payments, refunds, shipments and stock with
// the channel's ledger and with each other, and reports every difference:
// missing, unknown, duplicate or mismatched payments and refunds, refunds over
// the paid amount, duplicate or unpaid shipments, duplicate orders, stock that
// does not add up. Shop.Compensate repairs what the channel's side can repair
// (a lost callback, a refund the channel never got) through the same idempotent
// paths, so replaying it is harmless. A test plants each kind of difference
// directly in the database.
//
// # Backends
//
// Backends{} is embedded: SQLite (sqlstore.SQLiteDSN), the memory store as the
// fast path, an in-process lock with a TTL and fences, and MemQueue, an
// at-least-once queue with visibility-timeout redelivery that serves consumer
// processes over loopback. With fields set it runs on PostgreSQL (a fresh
// schema per run), Redis (tiered fast path, redislock, the inbox fast path),
// NATS JetStream or RabbitMQ.
//
// # The storm and its invariants
//
// RunStorm places StormConfig.Orders orders through concurrent clients and
// throws everything at them: double clicks, client timeouts and retries with
// the same key, a second client with the same request_id, the cashier opened
// twice from two devices, payments that fail after the channel charged (the
// connection dropped before the charge's recovery point, or a failure before
// the record) and are retried with the same key, payments abandoned after
// the charge with their callbacks lost (only reconciliation finds those
// charges), callbacks resent,
// reordered, dropped, forged, tampered and suspicious, pauses past the
// lock's TTL, outbox messages published twice, lost acks,
// failing handlers, rogue shipping requests for unpaid orders, the consumer
// process SIGKILLed between its commit and its ack and the outbox relay
// process (package outbox's Relay) SIGKILLed between the broker's confirm
// and its mark (real child processes: see RunChild), a private Redis flushed and then killed, reconciliation with
// compensation replayed, refunds sent twice and over the paid amount. Then it
// checks against the database and the channel's ledger: no acknowledged order
// lost, one order per request, every order charged exactly once, no payment or
// shipment duplicated, no unpaid order shipped, no paid order left unshipped,
// no refund over the paid amount, stock that adds up, no order refused, and a
// clean final reconciliation (which reports an order the channel charged
// twice). Result counts what each layer absorbed.
//
// # The anti-patterns
//
// Each Variant breaks one of the rules of docs/guarantees.md and keeps the others; RunCompare
// runs the same storm against each and reports the damage next to the
// disciplined shop, plus the database statements a flood of duplicates costs
// with and without the fast path (RunFlood).
package shop
