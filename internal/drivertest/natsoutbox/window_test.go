package natsoutbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// TestCheckDuplicateWindow: a stream whose duplicate window is shorter
// than the relay's worst visible redelivery delay is reported (a relay
// down for longer than a 1 s window republished 50 of 50 messages into
// the stream); the default 2 min window against the default relay
// settings (PassTimeout 30 s + MaxBackoff 30 s) is not.
func TestCheckDuplicateWindow(t *testing.T) {
	t.Parallel()
	rawURL := testenv.NATS.Need(t)
	ctx := ctxT(t)
	js := jetStream(t, rawURL)
	for _, c := range []struct {
		window time.Duration
		bad    bool
	}{{time.Second, true}, {0, false}} { // 0: the server's default, 2 min
		stream := testenv.Name("OBWIN")
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: c.window}); err != nil {
			t.Fatal(err)
		}
		defer js.DeleteStream(context.Background(), stream)
		err := natsoutbox.CheckDuplicateWindow(ctx, js, stream+".orders", nil)
		if c.bad && (err == nil || !strings.Contains(err.Error(), "1s")) {
			t.Errorf("window %v: %v; want it reported", c.window, err)
		}
		if !c.bad && err != nil {
			t.Errorf("default window: %v", err)
		}
		t.Logf("window %v: %v", c.window, err)
	}
	if err := natsoutbox.CheckDuplicateWindow(ctx, js, testenv.Name("nostream")+".x", &outbox.RelayConfig{}); err == nil {
		t.Error("a subject no stream captures was not reported")
	}
}
