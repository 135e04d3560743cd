package natsinbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// §1: an outage is not poison. The database is refused for a minute while
// messages keep arriving (some of them repeats), with the default retry
// settings (which used to terminate a valid message after a 15 s outage)
// and an AckWait far shorter than the outage. Afterwards every message
// has exactly one effect, none was dead-lettered or terminated, the
// stream is fully acked, and the subscriber did retry during the outage.
func TestDatabaseOutageIsNotPoison(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	odb := adaptertest.NewOutageInbox(t)
	s := newSub(t, odb.Inbox, env.cons, effect, natsinbox.Config{
		Concurrency: 4, DeadLetterSubject: dlq, JetStream: env.js,
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	before := adaptertest.IDs("before", 20)
	for _, id := range before {
		env.publish(t, id, "x")
	}
	odb.WaitEffects(t, len(before), 30*time.Second)

	during := odb.Outage(t, testenv.Refuse, time.Second, func(i int) {
		id := "during-" + strconv.Itoa(i)
		env.publish(t, id, "x")
		if i%3 == 0 {
			env.publish(t, id, "x") // a producer retry: same ID
		}
		if i%10 == 0 {
			env.publish(t, before[i%len(before)], "x") // a late redelivery of an old one
		}
	})
	retried := s.Stats().Retried
	odb.WaitEffects(t, len(before)+during, 60*time.Second)
	adaptertest.WaitFor(t, "the stream fully acked", 30*time.Second, func() bool { return env.settled(t) })

	st := s.Stats()
	if st.DeadLettered != 0 || len(env.deadLettered(t, dlq)) != 0 {
		t.Fatalf("after the outage: stats %+v, %d dead letters; want none", st, len(env.deadLettered(t, dlq)))
	}
	if retried == 0 {
		t.Fatal("no attempt failed during the outage: the fault did not reach the consumer")
	}
	t.Logf("outage %v: %d messages during it, %d retried attempts, %d duplicates acked", adaptertest.OutageDuration, during, retried, st.Duplicates)
}

// An event that arrives before its predecessor (the handler says
// inbox.ErrNotYet, as watermark.ErrGap does) is handed back for a later
// redelivery, not held (its predecessor is right behind it, and there is
// one worker) and never counted as a failure: with MaxFailures 1 any
// counting would dead-letter it.
func TestEarlyMessageRedeliveredNotPoison(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	edb, _ := newPostgresInbox(t)
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		if msg.Headers().Get(idHeader) == "v2" {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE id = 'v1'`).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%w: v1 not applied", inbox.ErrNotYet)
			}
		}
		return effect(ctx, tx, msg)
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{MaxFailures: 1, DeadLetterSubject: dlq, JetStream: env.js})
	env.publish(t, "v2", "second")
	env.publish(t, "v1", "first")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	edb.WaitEffects(t, 2, 30*time.Second)
	adaptertest.WaitFor(t, "the stream fully acked", 20*time.Second, func() bool { return env.settled(t) })
	if st := s.Stats(); st.DeadLettered != 0 || st.Retried == 0 || len(env.deadLettered(t, dlq)) != 0 {
		t.Fatalf("stats %+v; want v2 retried, nothing dead-lettered", st)
	}
}

// A migration locks the effects table while the statement timeout is
// short: every handler waiting behind the lock is cancelled by the server
// (57014, MariaDB 1969). That is infrastructure: with MaxFailures 1 any
// other verdict would dead-letter at once. Afterwards every message is
// applied exactly once and nothing was dead-lettered.
func TestMigrationLockIsNotPoison(t *testing.T) {
	t.Parallel()
	for _, d := range adaptertest.LockDialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newNATS(t, 5*time.Second)
			dlq := env.deadLetters(t)
			ldb := adaptertest.NewLockInbox(t, d)
			h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
				return ldb.Insert(ctx, tx, msg.Headers().Get(idHeader), string(msg.Data()))
			}
			s := newSub(t, ldb.Inbox, env.cons, h, natsinbox.Config{
				Concurrency: 2, MaxFailures: 1, DeadLetterSubject: dlq, JetStream: env.js,
			})
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer stop(t, s)
			released := ldb.Migration(t)
			ids := adaptertest.IDs("m", 10)
			for _, id := range ids {
				env.publish(t, id, "x")
			}
			<-released
			ldb.WaitEffects(t, len(ids), 30*time.Second)
			adaptertest.WaitFor(t, "the stream fully acked", 20*time.Second, func() bool { return env.settled(t) })
			if st := s.Stats(); st.DeadLettered != 0 || st.Retried == 0 || len(env.deadLettered(t, dlq)) != 0 {
				t.Fatalf("stats %+v, %d dead letters; want retries and no dead letter", st, len(env.deadLettered(t, dlq)))
			}
		})
	}
}

// A body that does not decode (empty, or truncated JSON) makes the handler
// return io.EOF or io.ErrUnexpectedEOF: poison, dead-lettered after
// MaxFailures, and the valid messages behind it are applied. At the
// default concurrency of 1 an "infrastructure" verdict would have held the
// consumer forever.
func TestMalformedBodyIsPoison(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	edb, _ := newPostgresInbox(t)
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		var v struct{ Order int }
		if err := json.NewDecoder(bytes.NewReader(msg.Data())).Decode(&v); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		return effect(ctx, tx, msg)
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{
		MaxFailures: 2, DeadLetterSubject: dlq, JetStream: env.js,
		BackoffFunc: func(int) time.Duration { return 10 * time.Millisecond },
	})
	env.publish(t, "empty", "")
	env.publish(t, "truncated", `{"Order": 4`)
	for _, id := range adaptertest.IDs("good", 5) {
		env.publish(t, id, `{"Order": 1}`)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	edb.WaitEffects(t, 5, 30*time.Second)
	// A copy is stored before the server's ack of it reaches the
	// subscriber, which counts it only then: wait for both.
	adaptertest.WaitFor(t, "both malformed messages dead-lettered and counted", 30*time.Second, func() bool {
		return len(env.deadLettered(t, dlq)) == 2 && s.Stats().DeadLettered >= 2
	})
	if st := s.Stats(); st.DeadLettered != 2 {
		t.Fatalf("stats %+v; want 2 dead-lettered", st)
	}
}

// The Stop bound: Stop(context.Background()) during an outage that does
// not end returns once the running attempt has failed, handing every
// message back (none is lost: after the outage a new subscriber applies
// them all).
func TestStopDuringOutageIsBounded(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	odb := adaptertest.NewOutageInbox(t)
	s := newSub(t, odb.Inbox, env.cons, effect, natsinbox.Config{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	odb.Proxy.Set(testenv.Refuse)
	ids := adaptertest.IDs("m", 20)
	for _, id := range ids {
		env.publish(t, id, "x")
	}
	adaptertest.WaitFor(t, "an attempt to fail", 20*time.Second, func() bool { return s.Stats().Retried > 0 })
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	adaptertest.WaitFor(t, "Stop to return with the database still away", 30*time.Second, func() bool { return len(stopped) == 1 })
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if rows, _ := odb.Counts(t); rows != 0 {
		t.Fatalf("%d effects during the outage", rows)
	}
	odb.Proxy.Set(testenv.Pass)
	s2 := newSub(t, odb.Inbox, env.cons, effect, natsinbox.Config{})
	if err := s2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s2)
	odb.WaitEffects(t, len(ids), 30*time.Second)
}
