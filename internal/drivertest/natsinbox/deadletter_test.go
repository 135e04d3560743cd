package natsinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// The dead-letter layouts of the package doc, on the real nats-server. In
// each, the business ID is the producer's Nats-Msg-Id (the default
// MessageIDFunc), and the originals carry the publish-control headers a
// producer may set: none of them may steer the copy's publish.

type dlEnv struct {
	js jetstream.JetStream
}

func newDLEnv(t *testing.T) *dlEnv {
	t.Helper()
	nc, err := nats.Connect(testenv.NATS.Need(t))
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &dlEnv{js: js}
}

func (e *dlEnv) stream(t *testing.T, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx := adaptertest.Ctx(t)
	cfg.Storage = jetstream.MemoryStorage
	st, err := e.js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.js.DeleteStream(ctx, cfg.Name)
	})
	return st
}

func (e *dlEnv) consumer(t *testing.T, st jetstream.Stream, name, filter string) jetstream.Consumer {
	t.Helper()
	c, err := st.CreateOrUpdateConsumer(adaptertest.Ctx(t), jetstream.ConsumerConfig{
		Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 5 * time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *dlEnv) publish(t *testing.T, subject, id, body string, hdr nats.Header) {
	t.Helper()
	m := nats.NewMsg(subject)
	for k, v := range hdr {
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Data = []byte(body)
	if _, err := e.js.PublishMsg(adaptertest.Ctx(t), m); err != nil {
		t.Fatalf("publish %s: %v", id, err)
	}
}

// copies returns the messages stored on subject in st.
func copies(t *testing.T, st jetstream.Stream, subject string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := adaptertest.Ctx(t)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == subject {
			out = append(out, m)
		}
	}
	return out
}

// poisonHandler: "permanent" bodies are refused with inbox.Permanent, "bad"
// ones fail with an ordinary error (poison after MaxFailures), the rest
// write an effect.
func poisonHandler(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
	switch string(msg.Data()) {
	case "permanent":
		return inbox.Permanent(errors.New("malformed"))
	case "bad":
		return errors.New("cannot parse")
	}
	return adaptertest.InsertEffect(ctx, tx, msg.Headers().Get(jetstream.MsgIDHeader), string(msg.Data()))
}

func runUntilSettled(t *testing.T, p inbox.Processor, cons jetstream.Consumer, cfg natsinbox.Config, wantDL uint64) *natsinbox.Subscriber {
	t.Helper()
	cfg.Logger = adaptertest.QuietLogger()
	cfg.BackoffFunc = func(int) time.Duration { return 20 * time.Millisecond }
	s, err := natsinbox.New(p, cons, poisonHandler, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "every message settled", 30*time.Second, func() bool {
		info, err := cons.Info(adaptertest.Ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return s.Stats().DeadLettered >= wantDL && info.NumPending == 0 && info.NumAckPending == 0
	})
	stop(t, s)
	return s
}

// One stream: the dead-letter subject inside the source stream, read by a
// filtered consumer. The copy used to carry the original's Nats-Msg-Id and
// was dropped as its duplicate.
func TestDeadLetterOneStream(t *testing.T) {
	t.Parallel()
	e := newDLEnv(t)
	name := testenv.Name("IDEMDL")
	st := e.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Duplicates: time.Minute})
	cons := e.consumer(t, st, "billing", name+".orders")
	edb, _ := newPostgresInbox(t)
	e.publish(t, name+".orders", "m-perm", "permanent", nil)
	e.publish(t, name+".orders", "m-bad", "bad", nil)
	e.publish(t, name+".orders", "m-good", "fine", nil)
	s := runUntilSettled(t, edb.Inbox, cons, natsinbox.Config{
		MaxFailures: 2, DeadLetterSubject: name + ".dead", JetStream: e.js,
	}, 2)
	dl := copies(t, st, name+".dead")
	if len(dl) != 2 || s.Stats().DeadLettered != 2 {
		t.Fatalf("%d copies stored, stats %+v; want 2 and 2", len(dl), s.Stats())
	}
	for i, m := range dl {
		orig := []string{"m-perm", "m-bad"}[i]
		seq := strconv.Itoa(i + 1)
		if m.Header.Get(natsinbox.OriginalHeaderPrefix+"Msg-Id") != orig ||
			m.Header.Get(jetstream.MsgIDHeader) != natsinbox.DeadLetterID(name, "billing", uint64(i+1)) ||
			m.Header.Get(natsinbox.SequenceHeader) != seq || m.Header.Get(natsinbox.StreamHeader) != name ||
			m.Header.Get(natsinbox.ConsumerHeader) != "billing" || m.Header.Get(natsinbox.ErrorHeader) == "" {
			t.Errorf("copy %d headers %v", i, m.Header)
		}
	}
	if rows, _ := edb.Counts(t); rows != 1 {
		t.Fatalf("%d effects, want 1", rows)
	}
}

// One dead-letter stream with a subject per consumer: two consumers that
// both dead-letter the same message keep a copy each.
func TestDeadLetterSharedStreamSubjectPerConsumer(t *testing.T) {
	t.Parallel()
	e := newDLEnv(t)
	name := testenv.Name("IDEMDL")
	st := e.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
	dls := e.stream(t, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{name + "_DLQ.>"}, Duplicates: time.Minute})
	edb, _ := newPostgresInbox(t)
	e.publish(t, name+".orders", "m-1", "permanent", nil)
	e.publish(t, name+".orders", "m-2", "bad", nil)
	for _, c := range []string{"billing", "ledger"} {
		runUntilSettled(t, edb.Inbox, e.consumer(t, st, c, ""), natsinbox.Config{
			MaxFailures: 2, DeadLetterSubject: name + "_DLQ." + c, JetStream: e.js,
		}, 2)
	}
	for _, c := range []string{"billing", "ledger"} {
		dl := copies(t, dls, name+"_DLQ."+c)
		if len(dl) != 2 {
			t.Fatalf("%s: %d copies, want 2", c, len(dl))
		}
		for _, m := range dl {
			if m.Header.Get(natsinbox.ConsumerHeader) != c {
				t.Errorf("%s: copy from %q", c, m.Header.Get(natsinbox.ConsumerHeader))
			}
		}
	}
}

// A producer's Nats-Rollup travels renamed: the dead-letter stream (which
// allows rollups) keeps every copy instead of purging the earlier ones.
func TestDeadLetterCopiedRollupPurgesNothing(t *testing.T) {
	t.Parallel()
	e := newDLEnv(t)
	name := testenv.Name("IDEMDL")
	st := e.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, AllowRollup: true})
	dls := e.stream(t, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{name + "_DLQ.>"}, AllowRollup: true})
	edb, _ := newPostgresInbox(t)
	for i := range 3 {
		e.publish(t, name+".orders."+strconv.Itoa(i), "m-"+strconv.Itoa(i), "permanent", nats.Header{"Nats-Rollup": {"sub"}})
	}
	runUntilSettled(t, edb.Inbox, e.consumer(t, st, "billing", ""), natsinbox.Config{
		DeadLetterSubject: name + "_DLQ.billing", JetStream: e.js,
	}, 3)
	dl := copies(t, dls, name+"_DLQ.billing")
	if len(dl) != 3 {
		t.Fatalf("%d copies left, want 3", len(dl))
	}
	if got := dl[0].Header.Get(natsinbox.OriginalHeaderPrefix + "Rollup"); got != "sub" {
		t.Fatalf("original Nats-Rollup not kept: headers %v", dl[0].Header)
	}
	if dl[0].Header.Get("Nats-Rollup") != "" {
		t.Fatal("the copy carries a Nats-Rollup")
	}
}

// A producer's Nats-Expected-Stream names the source stream; copied as
// is, it failed every dead-letter publish and the poison was never
// dead-lettered.
func TestDeadLetterCopiedExpectedStream(t *testing.T) {
	t.Parallel()
	e := newDLEnv(t)
	name := testenv.Name("IDEMDL")
	st := e.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
	dls := e.stream(t, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{name + "_DLQ.>"}})
	edb, _ := newPostgresInbox(t)
	e.publish(t, name+".orders", "m-1", "permanent", nats.Header{"Nats-Expected-Stream": {name}})
	e.publish(t, name+".orders", "m-2", "bad", nats.Header{"Nats-Expected-Stream": {name}})
	s := runUntilSettled(t, edb.Inbox, e.consumer(t, st, "billing", ""), natsinbox.Config{
		MaxFailures: 2, DeadLetterSubject: name + "_DLQ.billing", JetStream: e.js,
	}, 2)
	if dl := copies(t, dls, name+"_DLQ.billing"); len(dl) != 2 || s.Stats().DeadLettered != 2 {
		t.Fatalf("%d copies, stats %+v; want 2 dead-lettered", len(dl), s.Stats())
	}
}

// A Duplicate acknowledgement of the copy is handled explicitly. The same
// delivery dead-lettered twice (its Term was lost) keeps one copy and is
// terminated again, because the first copy is there; once that copy is
// gone from the stream (purged) while the duplicate window still remembers
// its ID, the original is not terminated but naked: nothing vanishes.
func TestDeadLetterDuplicateAck(t *testing.T) {
	t.Parallel()
	e := newDLEnv(t)
	name := testenv.Name("IDEMDL")
	st := e.stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
	dls := e.stream(t, jetstream.StreamConfig{Name: name + "_DLQ", Subjects: []string{name + "_DLQ.>"}, Duplicates: time.Minute})
	cons := e.consumer(t, st, "billing", "")
	edb, _ := newPostgresInbox(t)
	e.publish(t, name+".orders", "m-1", "permanent", nil)
	s, err := natsinbox.New(edb.Inbox, cons, poisonHandler, &natsinbox.Config{
		DeadLetterSubject: name + "_DLQ.billing", JetStream: e.js, Logger: adaptertest.QuietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msg := <-batch.Messages()
	if msg == nil {
		t.Fatal("no message fetched")
	}
	ctx := adaptertest.Ctx(t)
	for i := range 2 {
		if act, err := s.Handle(ctx, msg); act != inbox.DeadLettered {
			t.Fatalf("handling %d: %v, %v; want dead-lettered", i+1, act, err)
		}
	}
	dl := copies(t, dls, name+"_DLQ.billing")
	if len(dl) != 1 {
		for _, m := range dl {
			t.Logf("copy %d: %v", m.Sequence, m.Header)
		}
		t.Fatalf("%d copies, want 1", len(dl))
	}
	if err := dls.DeleteMsg(ctx, dl[0].Sequence); err != nil {
		t.Fatal(err)
	}
	act, err := s.Handle(ctx, msg)
	if act != inbox.HandedBack || err == nil {
		t.Fatalf("copy gone, duplicate window remembers it: %v, %v; want nacked", act, err)
	}
	if st := s.Stats(); st.DeadLettered != 2 || st.Retried != 1 {
		t.Fatalf("stats %+v; want 2 dead-lettered, 1 retried", st)
	}
}
