package observe_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/observe"
)

// Observers combines a hook with other observers (promidem's metrics,
// otelidem's tracer); nil ones are left out.
func ExampleObservers() {
	var count int
	counter := observe.ObserverFunc(func(_ context.Context, e observe.Event) {
		if e.Decision.Final() {
			count++
		}
	})
	printer := observe.ObserverFunc(func(_ context.Context, e observe.Event) { fmt.Println(e.Decision) })
	obs := observe.Observers(counter, nil, printer)
	obs.Decided(context.Background(), observe.Event{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionAcquired})
	obs.Decided(context.Background(), observe.Event{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionExecuted})
	fmt.Println("final decisions:", count)
	// Output:
	// acquired
	// executed
	// final decisions: 1
}
