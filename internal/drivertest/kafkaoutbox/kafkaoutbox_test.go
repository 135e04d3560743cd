package kafkaoutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/kafkaoutbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The publisher's header is the one kafkainbox reads by default.
func TestHeaderMatchesInbox(t *testing.T) {
	t.Parallel()
	if kafkaoutbox.MessageIDHeader != kafkainbox.DefaultMessageIDHeader {
		t.Fatalf("kafkaoutbox writes %q, kafkainbox reads %q", kafkaoutbox.MessageIDHeader, kafkainbox.DefaultMessageIDHeader)
	}
}

var fastGroup = []kgo.Opt{
	kgo.HeartbeatInterval(100 * time.Millisecond),
	kgo.SessionTimeout(time.Second),
	kgo.RebalanceTimeout(2 * time.Second),
	kgo.FetchMaxWait(100 * time.Millisecond),
}

// TestOutboxToInboxWithRebalance (Kafka on kfake, in process): two relays
// produce 400 messages over 20 keys to a 3-partition topic with the
// idempotent producer; two kafkainbox subscribers share the group and one
// leaves halfway (a rebalance hands its partitions, uncommitted records
// included, to the other). Every message is applied exactly once, per key
// in commit order. A record over the size limit is parked.
func TestOutboxToInboxWithRebalance(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	db, _ := testenv.PostgresDB(t)
	table := testenv.Name("ob")
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	effects := table + "_effects"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+effects+` (seq bigserial PRIMARY KEY, message_id text NOT NULL, okey text NOT NULL, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: table + "_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		n, _ := strconv.Atoi(string(r.Value))
		var id string
		for _, hd := range r.Headers {
			if hd.Key == kafkaoutbox.MessageIDHeader {
				id = string(hd.Value)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` (message_id, okey, n) VALUES ($1, $2, $3)`, id, string(r.Key), n)
		return err
	}
	var subs []*kafkainbox.Subscriber
	for range 2 {
		s, err := kafkainbox.New(ib, h, &kafkainbox.Config{Brokers: brokers, Group: "shipping", Topics: []string{topic}, ClientOpts: fastGroup})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	defer func() {
		for _, s := range subs {
			_ = s.Stop(context.Background())
		}
	}()
	for range 2 {
		// A record over the batch limit fails with kerr.MessageTooLarge,
		// as a broker's message.max.bytes would (kfake does not enforce
		// that one).
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(100000))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		pub, err := kafkaoutbox.New(cl)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ob.NewRelay(pub, &outbox.RelayConfig{BatchSize: 32, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer r.Stop(context.Background())
	}

	const n, keys = 400, 20
	enqueue := func(from, to int) {
		for i := from; i < to; i += 10 {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for j := i; j < i+10; j++ {
				m := outbox.Message{ID: "m-" + strconv.Itoa(j), Destination: topic, OrderingKey: "k" + strconv.Itoa(j%keys), Payload: []byte(strconv.Itoa(j/keys + 1))}
				if err := ob.Enqueue(ctx, tx, m); err != nil {
					t.Fatal(err)
				}
			}
			if j := i; j == 0 {
				if err := ob.Enqueue(ctx, tx, outbox.Message{ID: "huge", Destination: topic, OrderingKey: "other", Payload: make([]byte, 200000)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	applied := func() int { return adaptertest.CountEffects(t, ctx, db, effects) }
	wait := func(what string, cond func() bool) {
		adaptertest.WaitProgress(t, what, adaptertest.StallTimeout, func() (int, bool) { return applied(), cond() }, func() string {
			var st string
			r, _ := db.QueryContext(ctx, `SELECT state, COUNT(*), MAX(COALESCE(reason, '')) FROM `+table+` GROUP BY state`)
			for r.Next() {
				var a, b int
				var c string
				_ = r.Scan(&a, &b, &c)
				st += fmt.Sprintf(" state %d: %d (%s);", a, b, c)
			}
			r.Close()
			return fmt.Sprintf("%d applied;%s", applied(), st)
		})
	}
	enqueue(0, n/2)
	wait("half applied", func() bool { return applied() >= n/4 })
	if err := subs[1].Stop(ctx); err != nil { // the rebalance
		t.Fatal(err)
	}
	enqueue(n/2, n)
	wait("every message applied", func() bool { return applied() == n })

	rows, err := db.QueryContext(ctx, `SELECT okey, n FROM `+effects+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]int{}
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if v != last[k]+1 {
			t.Fatalf("key %s: #%d applied after #%d", k, v, last[k])
		}
		last[k] = v
	}
	in, err := ob.Get(ctx, "huge")
	if err != nil || in.State != outbox.Parked {
		t.Fatalf("oversized record: %+v, %v; want parked", in, err)
	}
	t.Logf("parked: %s", in.Reason)
}
