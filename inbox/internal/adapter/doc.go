// Package adapter is the consumer engine of the inbox broker adapters
// (natsinbox, amqpinbox, kafkainbox), as idem.Claimer is the request
// engine of Do, httpidem and the RPC interceptors.
//
// [Engine] owns the policy: one attempt through the inbox (a handler's
// panic becomes an error, the attempt is bounded by ProcessTimeout), the
// verdict on its error ([Classify]), and what becomes of the message:
// acked after the commit; retried in place, kept from redelivery, while
// an infrastructure failure lasts; parked when it came early, or handed
// back to come again later; handed back with backoff after an ordinary
// failure, with the poison budget counted in memory ([FailureCounts]);
// dead-lettered, with an [Envelope], when the budget is spent or the
// failure is permanent; handed back at once when the subscriber stops
// (the Stop bound). It counts every outcome ([Metrics]) and reports it to
// the subscriber's inbox.Observer.
//
// Each adapter implements [Broker] for its client: how a message is
// acked, handed back, redelivered after a wait, held in place,
// dead-lettered and discarded. It keeps only what is its broker's own:
// NATS's header rules and InProgress, AMQP's channels and retry queue,
// Kafka's partition workers, pausing and commits (a Kafka engine runs in
// place: a record is never handed back, which would break its
// partition's order). Parked messages wait in a [Parking] lot, or in a
// broker's own [Lot].
//
// The package is internal: its types are the contract between the engine
// and the adapters of this repository, free to change with them, not an
// API for third-party adapters. It is a package of the core module and
// needs only the standard library and package inbox.
package adapter
