package shop

import (
	"fmt"

	"github.com/idemkit/idem/fsm"
)

// Variant selects the disciplined shop or one that breaks exactly one rule of
// docs/guarantees.md, for `idem demo --compare`. Every variant keeps all the other
// layers; the storm and the invariant checks are the same for all.
type Variant int

const (
	// Disciplined is the shop as docs/guarantees.md prescribes it.
	Disciplined Variant = iota
	// CheckThenAct places an order with SELECT by request_id, then INSERT,
	// and has no unique index on request_id: concurrent submits from two
	// clients both find nothing and both insert.
	CheckThenAct
	// LockWithoutConstraint decrements stock under the lock by reading the
	// quantity and writing the computed value back, with neither a fence nor
	// a CHECK: when the lock expires during a pause, an update is lost.
	LockWithoutConstraint
	// DedupOutsideTx records the shipping message as seen in its own
	// transaction before the handler runs: when the handler then fails, the
	// redelivery is skipped as a duplicate and the shipment is lost.
	DedupOutsideTx
	// ShortTTL deduplicates payment callbacks in a fast store whose TTL is
	// shorter than the channel's resend window, with no unique index on the
	// trade number behind it: a late resend pays the order again.
	ShortTTL
	// JumpPath declares "ship" from CREATED and PAYING as well as from
	// PAID, a path around the payment check: a shipping request for an
	// unpaid order ships it.
	JumpPath
	// FrontendOnly relies on the disabled button: no form token, no
	// Idempotency-Key middleware, no unique index. Any other client (a
	// retrying app, a second tab) creates another order.
	FrontendOnly
	// RejectWithoutRedis answers 503 whenever the fast store (Redis) is
	// down, instead of falling through to the database.
	RejectWithoutRedis
	// RetriedFromTop runs the payment request's phases (order, charge,
	// record) without recovery points, and makes the channel's
	// idempotency key inside the handler, afresh on every attempt: a
	// retry after a failure between the charge and the record runs every
	// phase again, and the channel charges the order again.
	RetriedFromTop
)

// Variants lists the anti-patterns in the order of docs/case-study.md.
var Variants = []Variant{CheckThenAct, LockWithoutConstraint, DedupOutsideTx, ShortTTL, JumpPath, FrontendOnly, RejectWithoutRedis, RetriedFromTop}

func (v Variant) String() string {
	switch v {
	case Disciplined:
		return "disciplined"
	case CheckThenAct:
		return "check-then-act"
	case LockWithoutConstraint:
		return "lock-without-constraint"
	case DedupOutsideTx:
		return "dedup-outside-tx"
	case ShortTTL:
		return "short-redis-ttl"
	case JumpPath:
		return "fsm-jump-path"
	case FrontendOnly:
		return "frontend-only"
	case RejectWithoutRedis:
		return "redis-down-rejects"
	case RetriedFromTop:
		return "multi-phase-from-top"
	}
	return fmt.Sprintf("Variant(%d)", int(v))
}

// Rule is the rule (docs/guarantees.md) the variant breaks, in one line.
func (v Variant) Rule() string {
	switch v {
	case CheckThenAct:
		return "SELECT then INSERT instead of INSERT + unique index"
	case LockWithoutConstraint:
		return "a lock and no constraint: the lock is trusted for correctness"
	case DedupOutsideTx:
		return "the dedup row is committed outside the business transaction"
	case ShortTTL:
		return "a Redis dedup TTL shorter than the duplicate window, no DB backstop"
	case JumpPath:
		return "the state machine has a jump path to SHIPPED around PAID"
	case FrontendOnly:
		return "only the front end prevents double submits"
	case RejectWithoutRedis:
		return "Redis down means reject"
	case RetriedFromTop:
		return "a multi-phase request retried from the top, without recovery points"
	}
	return "every layer in place"
}

// Damage names the invariant a variant breaks, as the checks report it.
func (v Variant) Damage() string {
	switch v {
	case CheckThenAct, FrontendOnly:
		return "duplicate orders"
	case LockWithoutConstraint:
		return "stock units lost"
	case DedupOutsideTx:
		return "shipments lost"
	case ShortTTL:
		return "duplicate payments"
	case JumpPath:
		return "unpaid orders shipped"
	case RejectWithoutRedis:
		return "orders refused"
	case RetriedFromTop:
		return "orders charged twice"
	}
	return ""
}

// Order states.
const (
	StateCreated   = "CREATED"
	StatePaying    = "PAYING"
	StatePaid      = "PAID"
	StateShipped   = "SHIPPED"
	StateCancelled = "CANCELLED"
)

// OrderMachine is the order's state machine: one-directional and acyclic.
// With JumpPath the "ship" transition also starts from PAYING.
func OrderMachine(v Variant) fsm.Definition {
	ship := []string{StatePaid}
	if v == JumpPath {
		ship = []string{StateCreated, StatePaying, StatePaid}
	}
	return fsm.Definition{
		Initial: StateCreated,
		States:  []string{StateCreated, StatePaying, StatePaid, StateShipped, StateCancelled},
		Transitions: []fsm.Transition{
			{Name: "start_payment", From: []string{StateCreated}, To: StatePaying},
			{Name: "pay", From: []string{StatePaying}, To: StatePaid},
			{Name: "ship", From: ship, To: StateShipped},
			{Name: "cancel", From: []string{StateCreated, StatePaying}, To: StateCancelled},
		},
	}
}
