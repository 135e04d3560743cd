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
