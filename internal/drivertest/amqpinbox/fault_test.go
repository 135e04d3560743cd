package amqpinbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// §1: an outage is not poison. The database is black-holed for a minute
// (connections stay open, nothing answers) while messages keep arriving,
// some of them repeats; the dead-letter exchange is configured, so a
// message given up on would show there. Afterwards every message has
// exactly one effect, none was dead-lettered or dropped, and the queue is
// empty.
func TestDatabaseOutageIsNotPoison(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	odb := adaptertest.NewOutageInbox(t)
	s := newSub(t, odb.Inbox, env.conn, effect, amqpinbox.Config{
		Queue: env.queue, Concurrency: 4, DeadLetterExchange: dlx,
		ProcessTimeout: 2 * time.Second, // a black hole answers nothing: each attempt ends here
	})
	defer stop(t, s)
	before := adaptertest.IDs("before", 20)
	for _, id := range before {
		env.publish(t, id, "x")
	}
	odb.WaitEffects(t, len(before), 30*time.Second)

	during := odb.Outage(t, testenv.BlackHole, time.Second, func(i int) {
		id := "during-" + strconv.Itoa(i)
		env.publish(t, id, "x")
		if i%3 == 0 {
			env.publish(t, id, "x")
		}
		if i%10 == 0 {
			env.publish(t, before[i%len(before)], "x")
		}
	})
	retried := s.Stats().Retried
	odb.WaitEffects(t, len(before)+during, 60*time.Second)
	adaptertest.WaitFor(t, "the queue drained", 30*time.Second, func() bool { return env.ready(t, env.queue) == 0 })

	st := s.Stats()
	if st.DeadLettered != 0 || env.ready(t, dlq) != 0 || s.Err() != nil {
		t.Fatalf("after the outage: stats %+v, %d dead letters, Err %v; want none", st, env.ready(t, dlq), s.Err())
	}
	if retried == 0 {
		t.Fatal("no attempt failed during the outage: the fault did not reach the consumer")
	}
	t.Logf("outage %v: %d messages during it, %d retried attempts, %d duplicates acked", adaptertest.OutageDuration, during, retried, st.Duplicates)
}

// §4: the publishing channel is lost for real: the dead-letter exchange is
// deleted under a running subscriber, so its dead-letter publish raises a
// channel exception (404) that closes the channel. The subscriber reopens
// it on the next publish, keeps the poison message (requeued after the
// backoff each time, never in a hot loop: every requeue is preceded by a
// backoff), stays up (Err nil), and delivers the poison to the exchange
// once it exists again.
func TestPublishChannelLossReopened(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	edb, _ := newPostgresInbox(t)
	var calls, backoffs atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		calls.Add(1)
		return errors.New("cannot parse")
	}
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, MaxFailures: 1, DeadLetterExchange: dlx,
		BackoffFunc: func(int) time.Duration { backoffs.Add(1); return 20 * time.Millisecond },
	})
	defer stop(t, s)
	if err := env.ch.ExchangeDelete(dlx, false, false); err != nil {
		t.Fatal(err)
	}
	env.publish(t, "bad-1", "poison")
	adaptertest.WaitFor(t, "several failed dead-letter publishes", 20*time.Second, func() bool { return s.Stats().Retried >= 5 })
	if s.Err() != nil {
		t.Fatalf("Err = %v after the publishing channel was lost; want it reopened", s.Err())
	}
	if err := env.ch.ExchangeDeclare(dlx, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := env.ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		t.Fatal(err)
	}
	// The copy is in the DLQ before the subscriber, once the broker has
	// confirmed it and the original is acked, counts it: wait for both.
	adaptertest.WaitFor(t, "the poison message in the DLQ and counted", 20*time.Second, func() bool {
		return env.ready(t, dlq) == 1 && s.Stats().DeadLettered >= 1
	})
	if s.Err() != nil || s.Stats().DeadLettered != 1 {
		t.Fatalf("Err = %v, stats %+v", s.Err(), s.Stats())
	}
	// Every failed attempt but the last (which was dead-lettered) was
	// requeued after a backoff.
	if c, b := calls.Load(), backoffs.Load(); c > b+1 {
		t.Fatalf("%d attempts but only %d backoffs: requeued without backing off", c, b)
	}
}

// §4: the broker closes the subscriber's connection (rabbitmqctl
// close_connection, as an operator or a broker under memory pressure
// would). The subscriber ends by itself, says why through Err, and its
// unacked delivery is redelivered to a new subscriber: nothing is lost.
func TestServerClosedConnectionEndsSubscriber(t *testing.T) {
	t.Parallel()
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		testenv.Unavailable(t, "rabbitmqctl", err)
	}
	env := newAMQP(t, nil)
	edb, _ := newPostgresInbox(t)
	conn, err := amqp.Dial(testenv.AMQP.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	release := make(chan struct{})
	var entered atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if entered.Add(1) == 1 {
			<-release // hold the first delivery until the connection is gone
		}
		return effect(ctx, tx, d)
	}
	s := newSub(t, edb.Inbox, conn, h, amqpinbox.Config{Queue: env.queue})
	env.publish(t, "held-1", "x")
	adaptertest.WaitFor(t, "the handler to hold the delivery", 10*time.Second, func() bool { return entered.Load() == 1 })

	pid := connectionPID(t, ctl, conn.LocalAddr().String())
	if out, err := exec.Command(ctl, "close_connection", pid, "idem test").CombinedOutput(); err != nil {
		t.Fatalf("close_connection: %v\n%s", err, out)
	}
	select {
	case <-s.Done():
		t.Fatal("subscriber ended before its handler returned")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("subscriber did not end after the broker closed its connection")
	}
	if !errors.Is(s.Err(), amqpinbox.ErrChannelClosed) || !strings.Contains(s.Err().Error(), "idem test") {
		t.Fatalf("Err = %v, want ErrChannelClosed with the broker's reason", s.Err())
	}
	stop(t, s)

	// The handler's transaction committed but its ack could not be sent:
	// the broker requeued the delivery, and a new subscriber acks it as a
	// duplicate.
	rec := &adaptertest.Recorder{P: edb.Inbox}
	s2 := newSub(t, rec, env.conn, effect, amqpinbox.Config{Queue: env.queue})
	adaptertest.WaitFor(t, "the redelivery", 20*time.Second, func() bool { return rec.Duplicates.Load()+rec.Processed.Load() == 1 })
	stop(t, s2)
	if rows, _ := edb.Counts(t); rows != 1 || env.ready(t, env.queue) != 0 {
		t.Fatalf("effects=%d ready=%d; want 1, 0", rows, env.ready(t, env.queue))
	}
}

// connectionPID finds the broker's id of the connection whose client end
// is local ("127.0.0.1:port").
func connectionPID(t *testing.T, ctl, local string) string {
	t.Helper()
	var out []byte
	adaptertest.WaitFor(t, "the connection in rabbitmqctl", 20*time.Second, func() bool {
		var err error
		out, err = exec.Command(ctl, "-q", "list_connections", "--no-table-headers", "pid", "name").CombinedOutput()
		if err != nil {
			t.Fatalf("list_connections: %v\n%s", err, out)
		}
		return strings.Contains(string(out), local+" -> ")
	})
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[1] == local {
			return f[0]
		}
	}
	t.Fatalf("connection %s not in\n%s", local, out)
	return ""
}

// An event that arrives before its predecessor (inbox.ErrNotYet) is
// requeued after a wait, not held for good (its predecessor is behind it
// and there is one worker) and never counted: with MaxFailures 1 any
// counting would dead-letter it.
func TestEarlyMessageRequeuedNotPoison(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	edb, _ := newPostgresInbox(t)
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if d.MessageId == "v2" {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM effects WHERE id = 'v1'`).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%w: v1 not applied", inbox.ErrNotYet)
			}
		}
		return effect(ctx, tx, d)
	}
	env.publish(t, "v2", "second")
	env.publish(t, "v1", "first")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{Queue: env.queue, MaxFailures: 1, DeadLetterExchange: dlx, Prefetch: 1})
	defer stop(t, s)
	edb.WaitEffects(t, 2, 30*time.Second)
	if st := s.Stats(); st.DeadLettered != 0 || st.Retried == 0 || env.ready(t, dlq) != 0 {
		t.Fatalf("stats %+v; want v2 retried, nothing dead-lettered", s.Stats())
	}
}

// A migration locks the effects table while the statement timeout is
// short: the server cancels every waiting handler (57014, MariaDB 1969).
// With MaxFailures 1 any verdict but "infrastructure" would dead-letter
// at once; afterwards every message is applied exactly once.
func TestMigrationLockIsNotPoison(t *testing.T) {
	t.Parallel()
	for _, d := range adaptertest.LockDialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			env := newAMQP(t, nil)
			dlx, dlq := env.deadLetterQueue(t)
			ldb := adaptertest.NewLockInbox(t, d)
			h := func(ctx context.Context, tx *sql.Tx, dv *amqp.Delivery) error {
				return ldb.Insert(ctx, tx, dv.MessageId, string(dv.Body))
			}
			s := newSub(t, ldb.Inbox, env.conn, h, amqpinbox.Config{
				Queue: env.queue, Concurrency: 2, MaxFailures: 1, DeadLetterExchange: dlx,
			})
			defer stop(t, s)
			released := ldb.Migration(t)
			ids := adaptertest.IDs("m", 10)
			for _, id := range ids {
				env.publish(t, id, "x")
			}
			<-released
			ldb.WaitEffects(t, len(ids), 30*time.Second)
			adaptertest.WaitFor(t, "the queue drained", 20*time.Second, func() bool { return env.ready(t, env.queue) == 0 })
			if st := s.Stats(); st.DeadLettered != 0 || st.Retried == 0 || env.ready(t, dlq) != 0 {
				t.Fatalf("stats %+v, %d dead letters; want retries and no dead letter", st, env.ready(t, dlq))
			}
		})
	}
}

// A body that does not decode (empty, or truncated JSON) makes the
// handler return io.EOF or io.ErrUnexpectedEOF: poison, dead-lettered
// after MaxFailures, and the valid messages behind it are applied. At
// the default concurrency of 1 an "infrastructure" verdict would have held
// the queue forever.
func TestMalformedBodyIsPoison(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	edb, _ := newPostgresInbox(t)
	h := func(ctx context.Context, tx *sql.Tx, dv *amqp.Delivery) error {
		var v struct{ Order int }
		if err := json.NewDecoder(bytes.NewReader(dv.Body)).Decode(&v); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		return effect(ctx, tx, dv)
	}
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, MaxFailures: 2, DeadLetterExchange: dlx,
		BackoffFunc: func(int) time.Duration { return 10 * time.Millisecond },
	})
	defer stop(t, s)
	env.publish(t, "empty", "")
	env.publish(t, "truncated", `{"Order": 4`)
	for _, id := range adaptertest.IDs("good", 5) {
		env.publish(t, id, `{"Order": 1}`)
	}
	edb.WaitEffects(t, 5, 30*time.Second)
	// A copy is in the DLQ before the subscriber, once the broker has
	// confirmed it and the original is acked, counts it: wait for both.
	adaptertest.WaitFor(t, "both malformed messages dead-lettered and counted", 30*time.Second, func() bool {
		return env.ready(t, dlq) == 2 && s.Stats().DeadLettered >= 2
	})
	if st := s.Stats(); st.DeadLettered != 2 {
		t.Fatalf("stats %+v; want 2 dead-lettered", st)
	}
}

// The Stop bound: Stop(context.Background()) during an outage that does
// not end returns once the running attempt has failed, requeueing every
// delivery (none is lost: after the outage a new subscriber applies them
// all).
func TestStopDuringOutageIsBounded(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	odb := adaptertest.NewOutageInbox(t)
	s := newSub(t, odb.Inbox, env.conn, effect, amqpinbox.Config{Queue: env.queue, Prefetch: 20})
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
	s2 := newSub(t, odb.Inbox, env.conn, effect, amqpinbox.Config{Queue: env.queue})
	defer stop(t, s2)
	odb.WaitEffects(t, len(ids), 30*time.Second)
}
