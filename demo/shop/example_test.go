package shop_test

import (
	"fmt"

	"github.com/idemkit/idem/demo/shop"
	"github.com/idemkit/idem/fsm"
)

// The order's state machine, as the report draws it.
func ExampleOrderMachine() {
	m, err := fsm.New(fsm.SQLite, "orders", shop.OrderMachine(shop.Disciplined), nil)
	if err != nil {
		panic(err)
	}
	fmt.Print(m.Mermaid())
	// Output:
	// stateDiagram-v2
	//     [*] --> CREATED
	//     CREATED --> PAYING: start_payment
	//     PAYING --> PAID: pay
	//     PAID --> SHIPPED: ship
	//     CREATED --> CANCELLED: cancel
	//     PAYING --> CANCELLED: cancel
	//     SHIPPED --> [*]
	//     CANCELLED --> [*]
}

// The anti-patterns `idem demo --compare` runs beside the disciplined shop,
// and the damage each is expected to do.
func ExampleVariant() {
	for _, v := range shop.Variants {
		fmt.Printf("%-24s %s\n", v, v.Damage())
	}
	// Output:
	// check-then-act           duplicate orders
	// lock-without-constraint  stock units lost
	// dedup-outside-tx         shipments lost
	// short-redis-ttl          duplicate payments
	// fsm-jump-path            unpaid orders shipped
	// frontend-only            duplicate orders
	// redis-down-rejects       orders refused
	// multi-phase-from-top     orders charged twice
}
