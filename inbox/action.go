package inbox

import "strconv"

// Action is what a broker adapter (natsinbox, amqpinbox, kafkainbox) did
// with one delivery after its attempts: the same words for every broker.
type Action uint8

const (
	// Acked: processed, its transaction committed, then acknowledged (for
	// Kafka: the offset may be committed past it).
	Acked Action = iota + 1
	// AckedDuplicate: processed before; acknowledged without running the
	// handler.
	AckedDuplicate
	// HandedBack: failed or came early, and given back to the broker for a
	// later delivery (a NATS Nak with delay, an AMQP retry queue or
	// requeue); or the subscriber is stopping and gave it back at once
	// (for Kafka: left uncommitted, read again by the partition's next
	// owner).
	HandedBack
	// DeadLettered: poison, its copy stored at the dead-letter
	// destination, then settled so that the broker forgets it.
	DeadLettered
	// Parked: came early (ErrNotYet) and kept aside, unsettled, until
	// another message is applied.
	Parked
)

// String returns "acked", "acked-duplicate", "handed-back",
// "dead-lettered", "parked" or "Action(n)".
func (a Action) String() string {
	switch a {
	case Acked:
		return "acked"
	case AckedDuplicate:
		return "acked-duplicate"
	case HandedBack:
		return "handed-back"
	case DeadLettered:
		return "dead-lettered"
	case Parked:
		return "parked"
	}
	return "Action(" + strconv.Itoa(int(a)) + ")"
}
