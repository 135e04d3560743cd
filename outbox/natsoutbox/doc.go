// Package natsoutbox publishes outbox messages to NATS JetStream.
//
//	js, _ := jetstream.New(nc)
//	pub, _ := natsoutbox.New(js, nil)
//	relay, _ := ob.NewRelay(pub, nil)
//
// Each message is published asynchronously to the subject in its
// Destination (or Config.SubjectFunc's), with Nats-Msg-Id set to its ID,
// its headers, and Idem-Ordering-Key when it has an ordering key. It counts
// as confirmed when the stream's PubAck arrives (a PubAck marked duplicate
// included). A batch is published with all its messages in flight and
// its PubAcks awaited together.
//
// # With natsinbox
//
// natsinbox reads Nats-Msg-Id by default, so a natsinbox subscriber on the
// stream deduplicates the relay's messages with no configuration.
//
// # Under each fault
//
//   - Relay killed after the PubAck, before the mark: the next relay
//     publishes again with the same Nats-Msg-Id. Within the stream's
//     duplicate window (Duplicates, 2 min by default) JetStream drops it;
//     after it, the consumer's inbox does. Tested with relay processes
//     SIGKILLed at that point and a 100 ms window, so that most repeats
//     reach the inbox. CheckDuplicateWindow, called when the relay starts,
//     reports a stream whose window is shorter than the relay's own
//     worst-case delay before a repeat (PassTimeout + MaxBackoff); a relay
//     down for longer than the window republishes past it as well.
//   - Server away: publishes fail or time out (the relay's
//     PublishTimeout) and are retried with the relay's backoff; messages
//     the client had buffered while reconnecting may land and be published
//     again, deduplicated as above. Tested by killing a private
//     nats-server for 3 s and restarting it on the same store, while
//     messages keep coming: a few publish attempts, every message applied
//     once, per key in order.
//   - Link frozen with a batch larger than the client's limit of pending
//     acks (jetstream.WithPublishAsyncMaxPending, 4,000 by default): past
//     the limit each async publish stalls; a stall waits at most until
//     the Publish's context ends, the rest of the batch then fails at once
//     (retried), so Publish returns at PublishTimeout. Tested with 600
//     messages over a limit of 100 behind a black-holed link.
//   - Refused for good, parked by the relay with the reason and its class
//     (the label of the relay's parked counter, shown by 'idem outbox
//     list'): a payload over the server's max_payload or over the
//     stream's MaxMsgSize (JetStream 10054): too_large; a subject that is
//     not valid (nats: invalid subject): invalid_destination.
//   - Retried (transient) with the relay's backoff: no stream captures the
//     subject ("no response from stream": a stream created later receives
//     the message; watch Observer.Retried, the relay's "publishing is
//     failing" line and the lag for it), timeouts, a lost connection.
//
// # Control headers
//
// An application header named like a NATS control header ("Nats-" in any
// case) is refused at Enqueue when the outbox is configured with
// outbox.Config{CheckFunc: natsoutbox.Check}, which also refuses a
// Destination that is not a subject one can publish to (white space, an
// empty token, a wildcard): the business transaction gets
// outbox.ErrInvalidMessage instead of the relay parking the message. The
// check is a hook of the outbox's Config because Enqueue is the same for
// every broker and only the publisher knows its broker's rules. Without
// it, the publisher still never copies such a header (it sets Nats-Msg-Id
// itself), so an expectation header (Nats-Expected-Last-Sequence, 10071)
// cannot make the stream refuse a message on every attempt.
package natsoutbox
