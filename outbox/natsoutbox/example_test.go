package natsoutbox_test

import (
	"context"
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
