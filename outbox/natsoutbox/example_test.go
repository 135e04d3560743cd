package natsoutbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// When the relay starts, compare the stream's duplicate window with the
// relay's settings and log the mismatch. (It needs a NATS server, so it
// is compiled, not run.)
func ExampleCheckDuplicateWindow() {
	var js jetstream.JetStream // jetstream.New(nc)
	cfg := &outbox.RelayConfig{MaxBackoff: time.Minute}
	if err := natsoutbox.CheckDuplicateWindow(context.Background(), js, "ORDERS.paid", cfg); err != nil {
		slog.Warn("outbox relay", "err", err)
	}
}

// Check refuses at Enqueue what JetStream would refuse on every attempt.
func ExampleCheck() {
	for _, m := range []outbox.Message{
		{ID: "1", Destination: "ORDERS.paid", Headers: map[string]string{"Trace": "x"}},
		{ID: "2", Destination: "ORDERS.paid", Headers: map[string]string{"Nats-Expected-Last-Sequence": "7"}},
		{ID: "3", Destination: "ORDERS.paid now"},
	} {
		fmt.Println(m.ID, natsoutbox.Check(m))
	}
	// Output:
	// 1 <nil>
	// 2 natsoutbox: header "Nats-Expected-Last-Sequence" is a NATS control header (Nats-*); the relay sets Nats-Msg-Id itself
	// 3 natsoutbox: destination "ORDERS.paid now" is not a NATS subject one can publish to
}
