package natsoutbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// TestRefusalClasses: what JetStream refuses for good is permanent (the
// relay parks it): a payload over the stream's MaxMsgSize (10054) and a
// subject with a space; an application's Nats-* header is not copied, so
// an expectation header no longer makes the stream refuse the message;
// a subject no stream captures stays transient (a stream created later
// receives it).
func TestRefusalClasses(t *testing.T) {
	t.Parallel()
	rawURL := testenv.NATS.Need(t)
	ctx := ctxT(t)
	js := jetStream(t, rawURL)
	stream := testenv.Name("OBCLASS")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.MemoryStorage, MaxMsgSize: 100}); err != nil {
		t.Fatal(err)
	}
	defer js.DeleteStream(context.Background(), stream)
	pub, err := natsoutbox.New(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	errs := pub.Publish(pctx, []outbox.Message{
		{ID: "ok", Destination: stream + ".a", Payload: []byte("x")},
		{ID: "big", Destination: stream + ".a", Payload: bytes.Repeat([]byte("x"), 200)},
		{ID: "space", Destination: stream + ".a b", Payload: []byte("x")},
		{ID: "expect", Destination: stream + ".a", Payload: []byte("x"), Headers: map[string]string{"Nats-Expected-Last-Sequence": "999", "App": "1"}},
		{ID: "nostream", Destination: testenv.Name("nostream") + ".a", Payload: []byte("x")},
	})
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("ok: %v; with a Nats-* header: %v; want both published", errs[0], errs[3])
	}
	for _, i := range []int{1, 2} {
		if !outbox.IsPermanent(errs[i]) {
			t.Errorf("message %d: %v; want permanent", i, errs[i])
		}
	}
	for i, class := range map[int]string{1: outbox.ReasonTooLarge, 2: outbox.ReasonInvalidDestination} {
		if got := outbox.ReasonClass(errs[i].Error()); got != class {
			t.Errorf("message %d: class %q, want %q", i, got, class)
		}
	}
	if !strings.Contains(errs[1].Error(), "maximum") {
		t.Errorf("the size refusal does not say why: %v", errs[1])
	}
	if errs[4] == nil || outbox.IsPermanent(errs[4]) {
		t.Errorf("no stream: %v; want transient", errs[4])
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, stream+".a")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("App") != "1" || m.Header.Get("Nats-Expected-Last-Sequence") != "" {
		t.Fatalf("stored headers %v: want App copied, the Nats-* one not", m.Header)
	}
}

// TestCheckAtEnqueue: with natsoutbox.Check as outbox.Config.CheckFunc,
// Enqueue refuses in the business transaction what JetStream would refuse
// on every attempt (a Nats-* header, a subject with a space or a
// wildcard), writing nothing, and accepts an ordinary message.
func TestCheckAtEnqueue(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", "file:"+testenv.SQLitePath(t)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.SQLite, CheckFunc: natsoutbox.Check})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m    outbox.Message
		want string // "" when accepted
	}{
		{outbox.Message{ID: "ok", Destination: "ORDERS.paid", Headers: map[string]string{"App": "1"}}, ""},
		{outbox.Message{ID: "msgid", Destination: "ORDERS.paid", Headers: map[string]string{"Nats-Msg-Id": "x"}}, "control header"},
		{outbox.Message{ID: "expect", Destination: "ORDERS.paid", Headers: map[string]string{"nats-expected-last-sequence": "9"}}, "control header"},
		{outbox.Message{ID: "space", Destination: "ORDERS.a b"}, "not a NATS subject"},
		{outbox.Message{ID: "wild", Destination: "ORDERS.*"}, "not a NATS subject"},
		{outbox.Message{ID: "empty-token", Destination: "ORDERS..paid"}, "not a NATS subject"},
	} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = ob.Enqueue(ctx, tx, tc.m)
		if cerr := tx.Commit(); cerr != nil {
			t.Fatal(cerr)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.m.ID, err)
		case tc.want != "" && (!errors.Is(err, outbox.ErrInvalidMessage) || !strings.Contains(fmt.Sprint(err), tc.want)):
			t.Errorf("%s: %v, want ErrInvalidMessage saying %q", tc.m.ID, err, tc.want)
		}
		_, gerr := ob.Get(ctx, tc.m.ID)
		if stored := gerr == nil; stored != (tc.want == "") {
			t.Errorf("%s: stored %v (%v)", tc.m.ID, stored, gerr)
		}
	}
}
