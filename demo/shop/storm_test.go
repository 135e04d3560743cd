package shop

import (
	"context"
	"testing"
	"time"
)

func runStorm(t *testing.T, cfg StormConfig) *Result {
	t.Helper()
	cfg.ChildCommand = childCommand
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := RunStorm(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func logResult(t *testing.T, r *Result) {
	t.Helper()
	t.Logf("%s on %s: %d orders in %v, %d requests, %d statements", r.Name, r.Backends, r.Orders, r.Duration.Round(time.Millisecond), r.Requests, r.Statements)
	for _, l := range r.Layers {
		t.Logf("  layer %-14s %6d", l.Name, l.Count)
	}
	for _, l := range r.Defences {
		t.Logf("  defence %-18s %6d", l.Name, l.Count)
	}
	for _, l := range r.Storm {
		t.Logf("  storm %-26s %6d", l.Name, l.Count)
	}
	for _, v := range r.Violations {
		t.Logf("  VIOLATION %s: %d %v", v.Kind, v.Count, v.Examples)
	}
}

// The embedded storm: every fault thrown, every invariant holds, the
// consumer really was SIGKILLed between its commit and its ack, and the
// outbox relay between the broker's confirm and its mark.
func TestStormEmbedded(t *testing.T) {
	t.Parallel()
	r := runStorm(t, StormConfig{Orders: 100, Kills: 2})
	logResult(t, r)
	if !r.OK() {
		t.Fatalf("violations: %+v", r.Violations)
	}
	if r.Consumer.Kills < 2 {
		t.Errorf("consumer killed %d times, want 2", r.Consumer.Kills)
	}
	if r.Relay.Kills < 2 {
		t.Errorf("relay killed %d times, want 2", r.Relay.Kills)
	}
	// Every message sent; each kill came after a confirmed publish whose
	// message was then published again.
	if r.Relay.Messages == 0 || r.Relay.Sent != r.Relay.Messages {
		t.Errorf("outbox: %d of %d messages sent", r.Relay.Sent, r.Relay.Messages)
	}
	if r.Relay.Published < r.Relay.Messages+r.Relay.Kills {
		t.Errorf("relay confirmed %d publishes for %d messages and %d kills: the kills did not come between the confirm and the mark",
			r.Relay.Published, r.Relay.Messages, r.Relay.Kills)
	}
	if r.Acked == 0 {
		t.Fatal("no order acknowledged")
	}
	for _, l := range r.Layers {
		if l.Count == 0 {
			t.Errorf("layer %s absorbed nothing: the storm did not reach it", l.Name)
		}
	}
	// The payments that dropped their connection after the charge were
	// charged again with the charge step's derived key, and the channel
	// answered with the first trade.
	if n := r.Channel.KeyReplays; n == 0 {
		t.Error("the channel answered no charge from its key: no payment was retried between the charge and its recovery point")
	}
	// The abandoned payments (charged, never recorded, callbacks lost)
	// were found by reconciliation, and repaired: no violation above.
	missing := 0
	for _, d := range r.Found {
		if d.Kind == DiffPaymentMissing {
			missing++
		}
	}
	if missing == 0 {
		t.Error("reconciliation found no charge without a payment: the abandoned payments did not reach it")
	}
}
