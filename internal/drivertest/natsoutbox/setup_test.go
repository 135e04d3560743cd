package natsoutbox_test

import (
	"context"
	"database/sql"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pipeline is outbox (PostgreSQL) → JetStream → natsinbox → inbox.Process
// (PostgreSQL), with an effects table the consumer writes in its
// transaction.
type pipeline struct {
	db      *sql.DB // PostgreSQL: the inbox and the effects
	odb     *sql.DB // the outbox's database (the same one, or MariaDB)
	dialect outbox.Dialect
	dsn     string // odb's
	ob      *outbox.Outbox
	table   string
	js      jetstream.JetStream
	stream  string
	effects string
	sub     *natsinbox.Subscriber // set by consume
	events  *advisories           // set by consume
}

func newPipeline(t testing.TB, natsURL string, storage jetstream.StorageType, dupWindow time.Duration, d outbox.Dialect) *pipeline {
	t.Helper()
	ctx := ctxT(t)
	odb, dsn := testenv.PostgresDB(t)
	odb.SetMaxOpenConns(12)
	// The consumer's pool commits without waiting for the WAL flush: this
	// test never crashes PostgreSQL, and the consumer's fsyncs would
	// dominate its time.
	db, err := sql.Open("pgx", dsn+"&synchronous_commit=off")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(12)
	p := &pipeline{db: db, odb: odb, dialect: d, dsn: dsn, table: testenv.Name("ob"), stream: testenv.Name("OBT")}
	if d == outbox.MySQL {
		p.odb, p.dsn = testenv.MySQLDB(t)
		p.odb.SetMaxOpenConns(12)
	}
	if p.ob, err = outbox.New(p.odb, &outbox.Config{Dialect: d, Table: p.table}); err != nil {
		t.Fatal(err)
	}
	if err := p.ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	p.effects = p.table + "_effects"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+p.effects+` (seq bigserial PRIMARY KEY, message_id text NOT NULL, okey text NOT NULL, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	t.Cleanup(nc.Close)
	if p.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: p.stream, Subjects: []string{p.stream + ".>"}, Storage: storage, Duplicates: dupWindow}
	if _, err := p.js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.js.DeleteStream(ctx, p.stream)
	})
	return p
}

// enqueue commits messages from..to-1 over keys ordering keys, ten per
// transaction; message i of key k carries its rank within k as payload.
func (p *pipeline) enqueue(t testing.TB, from, to, keys int) {
	t.Helper()
	ctx := ctxT(t)
	for i := from; i < to; i += 10 {
		tx, err := p.odb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := i; j < min(i+10, to); j++ {
			m := outbox.Message{
				ID: "m-" + strconv.Itoa(j), Destination: p.stream + ".orders", OrderingKey: "k" + strconv.Itoa(j%keys),
				Payload: []byte(strconv.Itoa(j/keys + 1)), Headers: map[string]string{"Content-Type": "text/plain"},
			}
			if err := p.ob.Enqueue(ctx, tx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// consume starts natsinbox on the stream, with no MessageIDFunc: the
// default reads Nats-Msg-Id, which the publisher sets. No glue.
func (p *pipeline) consume(t *testing.T) *natsinbox.Subscriber {
	t.Helper()
	ctx := ctxT(t)
	st, err := p.js.Stream(ctx, p.stream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(p.db, &inbox.Config{Dialect: inbox.Postgres, Table: p.table + "_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		n, _ := strconv.Atoi(string(msg.Data()))
		_, err := tx.ExecContext(ctx, `INSERT INTO `+p.effects+` (message_id, okey, n) VALUES ($1, $2, $3)`,
			msg.Headers().Get(nats.MsgIdHdr), msg.Headers().Get("Idem-Ordering-Key"), n)
		return err
	}
	if p.events, err = watchAdvisories(p.js.Conn(), p.stream, "worker"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.events.stop)
	s, err := natsinbox.New(ib, cons, h, &natsinbox.Config{Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	p.sub = s
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// checkEffects waits until n distinct messages were applied, then asserts
// each exactly once and, per ordering key, in enqueue order. It waits as
// long as the consumer keeps moving through the stream (applies a message
// or acks a repeat as a duplicate; at load 30 a few thousand messages and
// their repeats took minutes): it fails when it did neither for
// adaptertest.StallTimeout, and then names each missing message with its
// outbox state, its copies in the stream and the consumer's state.
func (p *pipeline) checkEffects(t *testing.T, n int) {
	t.Helper()
	ctx := t.Context() // not ctxT's 120 s: a slow pipeline is waited for
	start := time.Now()
	longest := adaptertest.WaitProgress(t, "every message applied", adaptertest.StallTimeout, func() (int, bool) {
		ids := adaptertest.CountEffects(t, ctx, p.db, p.effects)
		moved := ids
		if p.sub != nil {
			moved += int(p.sub.Stats().Duplicates)
		}
		return moved, ids == n
	}, func() string { return p.explainMissing(t, n) })
	t.Logf("the consumer had applied all %d messages %v after the relays were done (at most %v without progress); %s",
		n, time.Since(start).Round(time.Second), longest.Round(time.Millisecond), p.consumerState(ctx))
	rows, err := p.db.QueryContext(ctx, `SELECT okey, n FROM `+p.effects+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		if n != last[k]+1 {
			t.Fatalf("key %s: message #%d applied after #%d", k, n, last[k])
		}
		last[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds; it fails only when cond stayed false
// for adaptertest.StallTimeout, a guard against a hang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	adaptertest.WaitProgress(t, what, adaptertest.StallTimeout, func() (int, bool) { return 0, cond() }, nil)
}

// natsServer is a private nats-server with JetStream on file storage, for
// the test that stops the broker (never the shared one).
type natsServer struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		testenv.Unavailable(t, "nats-server binary", err)
	}
	s := &natsServer{t: t, port: testenv.FreePort(t), dir: t.TempDir()}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *natsServer) start() {
	s.cmd = exec.Command("nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "js"))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	for range 100 {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("private nats-server on port %d did not come up", s.port)
}

// stop kills the server (SIGKILL) and reaps it.
func (s *natsServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// jetStream connects to the NATS server at rawURL (the test is marked
// unavailable when it does not answer) and returns its JetStream context;
// the connection closes with the test.
func jetStream(t testing.TB, rawURL string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(rawURL)
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
