// Package kafkaoutbox publishes outbox messages to Kafka with franz-go.
//
//	cl, _ := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
//	defer cl.Close()
//	pub, _ := kafkaoutbox.New(cl)
//	relay, _ := ob.NewRelay(pub, nil)
//
// The Destination is the topic, the OrderingKey the record key (so one key
// stays on one partition with the default partitioner), and the ID travels
// in the idem-message-id header (MessageIDHeader) next to the message's
// headers. A message counts as confirmed when its produce request was
// acknowledged.
//
// # With kafkainbox
//
// kafkainbox reads idem-message-id by default, so it deduplicates the
// relay's records with no configuration.
//
// # Under each fault
//
//   - The client's own retries of a produce request: franz-go's idempotent
//     producer (its default; do not disable it) makes the broker drop them.
//   - Relay killed after the acknowledgement, before the mark: the next
//     relay produces the record again (a new producer id, so the broker
//     keeps both); the consumer's inbox applies one.
//   - Broker away: Publish returns at the relay's PublishTimeout with the
//     records not yet acknowledged as transient failures, although
//     franz-go keeps them buffered and may deliver them later; the relay
//     produces them again after its backoff, and the inbox drops the
//     extra copy. Per-key order holds: the key's next message is produced
//     only after a later copy was acknowledged, and franz-go keeps a
//     partition's records in order. Tested on kfake closing every
//     connection for 3 s while messages keep coming: a few publish
//     attempts, every message applied once, per key in order.
//   - A consumer rebalance: tested on kfake (in process) with two relays
//     and two subscribers, one leaving halfway: every message applied
//     once, per key in commit order.
//   - Parked (refused for good), with the reason class that the relay's
//     parked counter and 'idem outbox list' show: a record too large
//     (kerr.MessageTooLarge or RecordListTooLarge, also from the client's
//     ProducerBatchMaxBytes: too_large), an invalid topic name
//     (invalid_destination), a topic the client may not write
//     (not_authorized), an invalid record (rejected).
//   - Retried (transient) with the relay's backoff: anything else,
//     including a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION: a
//     topic created later receives the record; an attempt may hold its
//     pass until PublishTimeout meanwhile, and the relay's "publishing is
//     failing" line, Observer.Retried and the lag show it), timeouts, a
//     lost connection, a leader election.
//   - The broker refuses a whole produce batch over the topic's
//     max.message.bytes, so the records refused as too large together are
//     produced again one at a time and only a record refused on its own is
//     parked. Tested with 30 small records and one of 8,000 bytes against
//     a 5,000-byte limit in one Publish: before, all 31 were parked; now
//     the 30 are acknowledged and the one parked. A record of another
//     pass sharing the partition's batch at the moment of the retry could
//     still be refused with it.
package kafkaoutbox
