// Package amqpoutbox publishes outbox messages to RabbitMQ (AMQP 0.9.1).
//
//	pub, _ := amqpoutbox.New("amqp://guest:guest@127.0.0.1:5672/", nil)
//	defer pub.Close()
//	relay, _ := ob.NewRelay(pub, nil)
//
// The Destination is "exchange/routing-key", or a queue name for the
// default exchange (see Route). Messages are published persistent and
// mandatory on a channel in confirm mode, with the message-id property set
// to the message's ID, the headers as AMQP headers, and idem-ordering-key
// when there is an ordering key. A message counts as confirmed on the
// broker's ack.
//
// # With amqpinbox
//
// amqpinbox reads the message-id property by default, so it deduplicates
// the relay's messages with no configuration.
//
// # Under each fault
//
//   - Relay killed after the ack, before the mark: the next relay
//     publishes again with the same message-id; RabbitMQ keeps both and
//     the consumer's inbox applies one.
//   - Broker away, connection lost or black-holed (open, silent): the
//     publish or the confirm fails by the relay's PublishTimeout, the
//     connection is dropped (waiting at most 1 s for the broker's
//     close-ok) and dialled again on the next batch — the default dial's
//     TCP connect and handshake end with the Publish's context — and the
//     relay retries with its backoff. A message the broker received but
//     did not confirm in time is published again: the inbox applies one.
//     Tested with the publisher's link black-holed through a fault proxy
//     for 3 s while messages keep coming: a few publish attempts, every
//     message applied once, per key in order.
//   - Connection reset or channel closed while confirms are outstanding:
//     the library nacks them, the publisher sees the close (NotifyClose),
//     fails those messages (retried: they stay pending and go out again)
//     and dials again on the next batch, after the relay's backoff.
//     Tested with every connection reset while a batch awaited its
//     confirms (the relay catches up, nothing lost, Stop returns), and
//     with the link black-holed for 4 s under four concurrent passes (the
//     process's CPU stays under a quarter of the outage: no spinning).
//
// # Refused for good (parked) and retried
//
//   - Parked, with the broker's reply as the reason and a reason class
//     (the label of the relay's parked counter, shown by 'idem outbox
//     list'): a message returned as unroutable under mandatory (312
//     NO_ROUTE: no_route; another return code: rejected), and a message to
//     an exchange that does not exist (the broker closes the channel with
//     404 NOT_FOUND "no exchange 'x'": missing_exchange; the messages of
//     the pass routed to that exchange are parked, the others retried on a
//     new channel).
//   - Retried with the relay's backoff: a nack, a confirm not received
//     within PublishTimeout, a lost or black-holed connection, a channel
//     closed by the broker for any other reason, a failed dial.
//
// Order: one ordering key has at most one message in flight, and a queue
// keeps publish order. A batch is published with all its messages in
// flight at once and its confirms awaited together, and the relay's
// concurrent passes have their batches in flight together on the one
// channel (a pass holds the channel only while it publishes). With
// several consumers on one queue, or requeues, the consumer side decides
// what order it sees.
package amqpoutbox
