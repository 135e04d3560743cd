package shop

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/redis/redisinbox"
	"github.com/redis/go-redis/v9"
)

// ChildEnv is the environment variable that turns a process into one of
// the shop's child processes, the shipping consumer or the outbox relay
// (see RunChild).
const ChildEnv = "IDEM_SHOP_CONSUMER"

// childConfig tells a consumer process where everything is.
type childConfig struct {
	Role      string  `json:"role,omitempty"` // roleConsumer or roleRelay
	Driver    string  `json:"driver"`
	DSN       string  `json:"dsn"`
	Postgres  bool    `json:"postgres"`
	Queue     string  `json:"queue"` // memory, nats, amqp
	QueueURL  string  `json:"queue_url"`
	QueueName string  `json:"queue_name"`
	RedisURL  string  `json:"redis_url,omitempty"`
	Variant   Variant `json:"variant"`
	CrashAt   int     `json:"crash_at"`   // stop dead after this many commits, before the ack; relay: published messages, before the mark (0: never)
	LostAck   float64 `json:"lost_ack"`   // probability that an ack is "lost" (nacked after the commit)
	FailEvery int     `json:"fail_every"` // the handler fails the first delivery of 1 in FailEvery messages
	// DuplicateEvery: the relay publishes 1 in DuplicateEvery messages twice.
	DuplicateEvery int `json:"duplicate_every,omitempty"`
}

// errInjected is the shipping handler's simulated failure (the label
// printer timed out).
var errInjected = errors.New("shop: shipping label service timed out (injected)")

// IsChild reports whether this process was started as a child of the
// storm: the shipping consumer or the outbox relay.
func IsChild() bool { return os.Getenv(ChildEnv) != "" }

// RunChild runs the shipping consumer or the outbox relay described by the
// environment until its stdin closes or it is killed, and returns the exit
// status. A program
// that may be started as the child calls it first thing (the idem binary
// does in "idem demo"; the tests in TestMain).
func RunChild() int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(ChildEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "shop consumer: bad config:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // parent gone: stop
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(kind, id string) {
		mu.Lock()
		fmt.Fprintf(out, "%s %s\n", kind, id)
		_ = out.Flush()
		mu.Unlock()
	}
	run, name := consume, "shop consumer:"
	if cfg.Role == roleRelay {
		run, name = relay, "shop relay:"
	}
	if err := run(ctx, cfg, say); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, name, err)
		return 1
	}
	return 0
}

func consume(ctx context.Context, cfg childConfig, say func(kind, id string)) error {
	db, err := sql.Open(cfg.Driver, cfg.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	d := fsm.SQLite
	if cfg.Postgres {
		d = fsm.Postgres
	}
	icfg := &inbox.Config{Dialect: d}
	if cfg.RedisURL != "" {
		opt, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return err
		}
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		fp, err := redisinbox.New(rdb, &redisinbox.Config{Prefix: "shop:inbox:", Timeout: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		icfg.FastPath = fp
	}
	ib, err := inbox.New(db, icfg)
	if err != nil {
		return err
	}
	m, err := fsm.New(d, "orders", OrderMachine(cfg.Variant), nil)
	if err != nil {
		return err
	}
	var rcv receiver
	switch cfg.Queue {
	case "memory":
		rcv = &memReceiver{base: cfg.QueueURL, http: &http.Client{Timeout: 5 * time.Second}}
	case "nats":
		q, err := openNATS(ctx, cfg.QueueURL, cfg.QueueName, false, true)
		if err != nil {
			return err
		}
		rcv = q
	case "amqp":
		q, err := openAMQP(cfg.QueueURL, cfg.QueueName, false, true)
		if err != nil {
			return err
		}
		rcv = q
	default:
		return fmt.Errorf("unknown queue %q", cfg.Queue)
	}
	defer rcv.Close()
	say("R", "-") // connected: ready for deliveries

	failed := map[string]bool{}
	commits := 0
	for ctx.Err() == nil {
		dl, err := rcv.Receive(ctx)
		if errors.Is(err, errNoMessage) {
			continue
		} else if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var body struct {
			OrderID string `json:"order_id"`
		}
		_ = json.Unmarshal(dl.Body, &body)
		shouldFail := cfg.FailEvery > 0 && !failed[dl.ID] && hashMod(dl.ID, cfg.FailEvery) == 0
		illegal := false
		ship := func(ctx context.Context, tx *sql.Tx) error {
			if shouldFail {
				failed[dl.ID] = true
				return errInjected
			}
			res, err := m.Fire(ctx, tx, body.OrderID, "ship", &fsm.Options{Set: map[string]any{"tracking": "TRK-" + body.OrderID}})
			switch {
			case errors.Is(err, fsm.ErrIllegalTransition), errors.Is(err, fsm.ErrNotFound):
				illegal = true // an anomaly: consumed, and alerted, never retried
				return nil
			case err != nil:
				return err
			case res.Outcome == fsm.Applied:
				_, err = tx.ExecContext(ctx, rebind(d, `INSERT INTO shipments (id, order_id, tracking) VALUES (?, ?, ?)`), dl.ID, body.OrderID, "TRK-"+body.OrderID)
				return err
			}
			say("S", dl.ID) // the state machine absorbed it
			return nil
		}
		var out inbox.Outcome
		if cfg.Variant == DedupOutsideTx {
			// Anti-pattern 3: mark the message seen in its own transaction,
			// then do the work in another.
			out, err = ib.Process(ctx, "shipping", dl.ID, func(context.Context, *sql.Tx) error { return nil })
			if err == nil && out == inbox.Processed {
				err = inTx(ctx, db, ship)
			}
		} else {
			out, err = ib.Process(ctx, "shipping", dl.ID, ship)
		}
		switch {
		case err != nil:
			say("F", dl.ID)
			_ = dl.Nack(ctx)
			continue
		case out == inbox.Duplicate:
			say("D", dl.ID)
		case illegal:
			say("I", dl.ID)
		default:
			say("P", dl.ID)
		}
		commits++
		if cfg.CrashAt > 0 && commits >= cfg.CrashAt {
			say("C", dl.ID) // committed, not acked: the parent kills us now
			<-ctx.Done()
			return nil
		}
		if cfg.LostAck > 0 && mrand.Float64() < cfg.LostAck {
			say("L", dl.ID)
			_ = dl.Nack(ctx)
			continue
		}
		_ = dl.Ack(ctx)
	}
	return nil
}

func inTx(ctx context.Context, db *sql.DB, fn func(context.Context, *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

func hashMod(s string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int(h.Sum32() % uint32(n))
}

// ConsumerStats aggregates what the consumer processes reported.
type ConsumerStats struct {
	Processed, Duplicates, FSMDuplicates, Illegal, Failed, LostAcks, Kills, Restarts int64
}

// consumers runs consumer children one at a time, killing one with SIGKILL
// between its commit and its ack whenever it reaches its crash point, and
// starting the next. With cfg.Role roleRelay it runs the outbox relay the
// same way, killed between the broker's confirm and the mark.
type consumers struct {
	cfg     childConfig
	command func() *exec.Cmd
	kills   int // how many kills to perform
	rnd     *mrand.Rand

	processed, dups, fsmDups, illegal, failed, lost, killed, restarts atomic.Int64
	published                                                         atomic.Int64 // relay: messages the broker confirmed
	lines                                                             atomic.Int64
	ready                                                             atomic.Bool // a consumer process is connected

	mu     sync.Mutex
	err    error // the last failure of a consumer process (not a kill)
	done   chan struct{}
	cancel context.CancelFunc
}

func (c *consumers) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			cfg := c.cfg
			if int(c.killed.Load()) < c.kills {
				if cfg.Role == roleRelay {
					cfg.CrashAt = 2 + c.rnd.IntN(8)
				} else {
					cfg.CrashAt = 5 + c.rnd.IntN(40)
				}
			}
			if err := c.runOne(ctx, cfg); err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
				if ctx.Err() == nil {
					time.Sleep(200 * time.Millisecond)
				}
			}
			if ctx.Err() == nil {
				c.restarts.Add(1)
			}
		}
	}()
}

// runOne runs one child until it reaches its crash point (then it is
// killed), exits, or ctx ends.
func (c *consumers) runOne(ctx context.Context, cfg childConfig) error {
	b, _ := json.Marshal(cfg)
	cmd := c.command()
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(b))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start consumer: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = stdin.Close() })
	defer stop()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		kind, _, _ := strings.Cut(sc.Text(), " ")
		c.lines.Add(1)
		switch kind {
		case "P":
			c.processed.Add(1)
		case "D":
			c.dups.Add(1)
		case "S":
			c.fsmDups.Add(1)
		case "I":
			c.illegal.Add(1)
		case "F":
			c.failed.Add(1)
		case "L":
			c.lost.Add(1)
		case "U":
			c.published.Add(1)
		case "R":
			c.ready.Store(true)
		case "C":
			// Between the commit and the ack (the relay: between the
			// broker's confirm and the mark): kill it for real.
			c.ready.Store(false)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			c.killed.Add(1)
		}
	}
	c.ready.Store(false)
	_ = stdin.Close()
	werr := cmd.Wait()
	if ctx.Err() != nil || werr == nil {
		return nil
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return nil
	}
	what := "consumer"
	if cfg.Role == roleRelay {
		what = "relay"
	}
	return fmt.Errorf("%s exited: %v: %s", what, werr, errb.String())
}

func (c *consumers) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

func (c *consumers) stats() ConsumerStats {
	return ConsumerStats{c.processed.Load(), c.dups.Load(), c.fsmDups.Load(), c.illegal.Load(), c.failed.Load(), c.lost.Load(), c.killed.Load(), c.restarts.Load()}
}

// RelayStats aggregates what the outbox relay processes reported.
type RelayStats struct {
	Messages  int64 `json:"messages"`  // messages in the outbox (each enqueued once, by the PAID transaction)
	Sent      int64 `json:"sent"`      // of which marked sent
	Published int64 `json:"published"` // publishes the broker confirmed (a republished message counts again)
	Kills     int64 `json:"kills"`     // SIGKILLs between the broker's confirm and the mark
	Restarts  int64 `json:"restarts"`
}

func (c *consumers) relayStats() RelayStats {
	return RelayStats{Published: c.published.Load(), Kills: c.killed.Load(), Restarts: c.restarts.Load()}
}

// lastError is the last failure of a child process (not a kill), or "".
func (c *consumers) lastError() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err.Error()
	}
	return ""
}
