package natsinbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// The broker is SIGKILLed while the subscriber is consuming and restarted
// on the same port and store a moment later: the client reconnects, the
// iterator resumes, and every message has exactly one effect (acks lost in
// the crash come back as redeliveries, acked as duplicates).
func TestBrokerKilledAndRestarted(t *testing.T) {
	t.Parallel()
	srv := adaptertest.StartNATS(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := adaptertest.Ctx(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"ORDERS.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		m := nats.NewMsg("ORDERS.new")
		m.Header.Set(idHeader, "m-"+strconv.Itoa(i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	edb, _ := newPostgresInbox(t)
	var handled atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		handled.Add(1)
		time.Sleep(2 * time.Millisecond) // keep the consumer busy across the crash
		return effect(ctx, tx, msg)
	}
	s := newSub(t, edb.Inbox, cons, h, natsinbox.Config{Concurrency: 4,
		MessagesOpts: []jetstream.PullMessagesOpt{jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(3 * time.Second)}})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	adaptertest.WaitFor(t, "a third of the messages", 30*time.Second, func() bool { return handled.Load() >= n/3 })
	srv.Kill()
	time.Sleep(500 * time.Millisecond)
	srv.Start()
	adaptertest.WaitFor(t, "every message applied after the restart", 90*time.Second, func() bool {
		r, d := edb.Counts(t)
		if r != d {
			t.Fatalf("duplicate effect: %d rows, %d IDs", r, d)
		}
		return d == n
	})
	adaptertest.WaitFor(t, "the stream fully acked", 60*time.Second, func() bool {
		ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := cons.Info(ictx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	t.Logf("handler runs %d for %d messages; stats %+v", handled.Load(), n, s.Stats())
}
