package shop

import (
	"os/exec"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

func needRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server binary (for a private Redis the storm flushes and kills)", err)
	}
}

// The storm on PostgreSQL, a private Redis (tiered fast path, redislock,
// inbox fast path; flushed, then killed and restarted empty midway) and NATS
// JetStream, with the consumer SIGKILLed between commit and ack and the
// outbox relay between the broker's confirm and its mark.
func TestStormPostgresRedisNATS(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres.Need(t)
	nats := testenv.NATS.Need(t)
	needRedisServer(t)
	r := runStorm(t, StormConfig{Orders: 100, Kills: 2, Backends: Backends{Postgres: pg, Redis: "private", Queue: nats, Dir: t.TempDir()}})
	logResult(t, r)
	checkGreen(t, r)
	for _, s := range r.Storm {
		if (s.Name == "Redis flushes" || s.Name == "Redis kills") && s.Count != 1 {
			t.Errorf("%s = %d, want 1", s.Name, s.Count)
		}
	}
}

// The storm on RabbitMQ (with the embedded SQLite and memory store).
func TestStormRabbitMQ(t *testing.T) {
	t.Parallel()
	amqp := testenv.AMQP.Need(t)
	r := runStorm(t, StormConfig{Orders: 100, Kills: 2, Backends: Backends{Queue: amqp, Dir: t.TempDir()}})
	logResult(t, r)
	checkGreen(t, r)
}

func checkGreen(t *testing.T, r *Result) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("violations: %+v", r.Violations)
	}
	if r.Consumer.Kills == 0 {
		t.Error("the consumer was never killed")
	}
	if r.Relay.Kills == 0 {
		t.Error("the relay was never killed")
	}
	if r.Acked < int64(r.Orders)*9/10 {
		t.Errorf("only %d of %d orders acknowledged", r.Acked, r.Orders)
	}
	for _, l := range r.Layers {
		if l.Count == 0 {
			t.Errorf("layer %s absorbed nothing: the storm did not reach it", l.Name)
		}
	}
}
