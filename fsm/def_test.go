package fsm

// orderDef is the order machine of the package documentation.
func orderDef() Definition {
	return Definition{
		Initial: "CREATED",
		States:  []string{"CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"},
		Transitions: []Transition{
			{Name: "pay", From: []string{"CREATED"}, To: "PAID"},
			{Name: "ship", From: []string{"PAID"}, To: "SHIPPED"},
			{Name: "deliver", From: []string{"SHIPPED"}, To: "DELIVERED"},
			{Name: "cancel", From: []string{"CREATED", "PAID"}, To: "CANCELLED"},
		},
	}
}

func ptr[T any](v T) *T { return &v }
