package natsinbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

var crash = adaptertest.Crash{Env: "IDEM_NATSINBOX_CRASH_CHILD", Test: "TestCrashBetweenCommitAndAck"}

func TestMain(m *testing.M) { adaptertest.Main(m, crash) }

// idHeader carries the business message ID in the tests. It is deliberately
// not Nats-Msg-Id, so the stream's own duplicate window does not swallow the
// duplicates the tests publish on purpose.
const idHeader = "Idem-Message-Id"

type natsEnv struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
}

// newNATS creates a memory stream and a durable pull consumer with unique
// names, deleted when the test ends.
func newNATS(t testing.TB, ackWait time.Duration) *natsEnv {
	t.Helper()
	j := adaptertest.NewJetStream(t, ackWait)
	return &natsEnv{nc: j.NC, js: j.JS, stream: j.Stream, cons: j.Cons}
}

func (e *natsEnv) publish(t testing.TB, id string, body string) {
	t.Helper()
	m := nats.NewMsg(e.stream + ".orders")
	if id != "" {
		m.Header.Set(idHeader, id)
	}
	m.Data = []byte(body)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// settled reports whether every message of the stream has been acked or
// terminated and none is waiting or in flight.
func (e *natsEnv) settled(t testing.TB) bool { return e.rig().Settled(t) }

type effectDB = adaptertest.EffectDB

func newPostgresInbox(t testing.TB) (*effectDB, string) { return adaptertest.NewPostgresInbox(t) }

// effect is the business change: insert one effects row in the inbox tx.
func effect(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
	return adaptertest.InsertEffect(ctx, tx, msg.Headers().Get(idHeader), string(msg.Data()))
}

// deadLetters creates a memory stream capturing a dead-letter subject and
// returns the subject.
func (e *natsEnv) deadLetters(t testing.TB) string { return e.rig().DeadLetterStream(t) }

// deadLettered returns the messages in the dead-letter stream of subject.
func (e *natsEnv) deadLettered(t testing.TB, _ string) []*jetstream.RawStreamMsg {
	return e.rig().DeadLettered(t)
}

func (e *natsEnv) rig() *adaptertest.JetStream {
	return &adaptertest.JetStream{NC: e.nc, JS: e.js, Stream: e.stream, Cons: e.cons}
}
