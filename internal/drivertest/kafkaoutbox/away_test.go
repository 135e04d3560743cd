package kafkaoutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/kafkaoutbox"
)

// countingPublisher counts Publish calls.
type countingPublisher struct {
	outbox.Publisher
	calls atomic.Int64
}

func (c *countingPublisher) Publish(ctx context.Context, b []outbox.Message) []error {
	c.calls.Add(1)
	return c.Publisher.Publish(ctx, b)
}

// TestBrokerAway (Kafka on kfake, in process): for 3 s the broker closes
// every connection on its first request, for every client (a kfake
// control function: the broker is away for the relay and the consumer
// alike), while messages keep being committed. The relay backs off (a
// bounded number of publish attempts), nothing is lost, it catches up once
// the broker is back, and kafkainbox applies every message once, per key
// in commit order. Publish must give up at the relay's PublishTimeout even
// then (franz-go keeps the records buffered and may deliver them later:
// the copies the relay makes afterwards are dropped by the inbox).
//
// Sized at 3 s: with waits doubling from 50 ms to 1 s the backoff reaches
// its cap within the first seconds, so a longer outage only repeats the
// same capped wait.
func TestBrokerAway(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var away atomic.Bool
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if away.Load() {
			return nil, errors.New("broker away"), true // closes the connection
		}
		return nil, nil, false
	})
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
	sub, err := kafkainbox.New(ib, h, &kafkainbox.Config{Brokers: brokers, Group: "shipping", Topics: []string{topic}, ClientOpts: fastGroup})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	kp, err := kafkaoutbox.New(cl)
	if err != nil {
		t.Fatal(err)
	}
	cp := &countingPublisher{Publisher: kp}
	r, err := ob.NewRelay(cp, &outbox.RelayConfig{PublishTimeout: 500 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())

	const keys = 10
	enqueue := func(from, to int) { adaptertest.EnqueueOrdered(t, ctx, db, ob, topic, keys, from, to) }
	waitApplied := func(n int) { adaptertest.WaitApplied(t, ctx, db, effects, n, adaptertest.StallTimeout) }
	enqueue(0, 100)
	waitApplied(100)
	away.Store(true)
	before := cp.calls.Load()
	enqueue(100, 200) // the business goes on while the broker is away
	time.Sleep(3 * time.Second)
	during := cp.calls.Load() - before
	away.Store(false)
	waitApplied(200)

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
	var open int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table+` WHERE state <> 1`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d messages not sent (%v)", open, err)
	}
	if during > 40 {
		t.Fatalf("%d publish attempts in a 3 s outage: the relay spins", during)
	}
	// And Publish gives up at PublishTimeout although franz-go keeps the
	// records buffered: one Publish hanging for the whole outage would be
	// a single call.
	if during < 2 {
		t.Fatalf("%d publish attempts in a 3 s outage: Publish outlived its timeout", during)
	}
	t.Logf("%d publish attempts during the 3 s outage", during)
}
