package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/redis/redislock"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/tiered"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"modernc.org/sqlite"
)

// Backends chooses what the shop runs on. The zero value is the embedded
// shop: SQLite in a temporary directory, the memory store as the fast path,
// an in-process lock and the in-process at-least-once queue.
type Backends struct {
	// Postgres is a PostgreSQL URL; each run gets a fresh schema, dropped at
	// the end. Empty: SQLite.
	Postgres string
	// Redis is "" (none), "private" (start a private redis-server in the
	// work directory, which the storm flushes and kills), or a redis:// URL
	// (used under its own key prefix, never flushed or killed).
	Redis string
	// Queue is "" (the in-process queue), a nats:// URL (JetStream) or an
	// amqp:// URL (RabbitMQ).
	Queue string
	// Dir is the work directory; empty: a temporary one, removed at the end.
	Dir string
}

// Describe names the backends in one line.
func (b Backends) Describe() string {
	db, fast, q := "SQLite", "memory store", "in-process queue"
	if b.Postgres != "" {
		db = "PostgreSQL"
	}
	switch {
	case b.Redis == "private":
		fast = "Redis (private, flushed and killed)"
	case b.Redis != "":
		fast = "Redis"
	}
	switch {
	case len(b.Queue) >= 4 && b.Queue[:4] == "nats":
		q = "NATS JetStream"
	case len(b.Queue) >= 4 && b.Queue[:4] == "amqp":
		q = "RabbitMQ"
	}
	return db + " + " + fast + " + " + q
}

// stack is one run's opened backends.
type stack struct {
	b      Backends
	dir    string
	d      Dialect
	driver string
	dsn    string
	db     *sql.DB
	stmts  StatementCounter

	redisURL string
	redis    *privateRedis
	rdb      *redis.Client

	queueKind, queueURL, queueName string
	mem                            *MemQueue
	pub                            publisher
	backlogFunc                    func(context.Context) (int, error)

	durable *sqlstore.Store
	fast    idem.Store
	records idem.Store
	tiered  *tiered.Store
	tokens  *onetime.Tokens
	locker  lock.Locker
	ib      *inbox.Inbox
	ob      *outbox.Outbox

	cleanup []func()
}

func (s *stack) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
	s.cleanup = nil
}

// openStack opens the backends for one run of variant v.
func openStack(ctx context.Context, b Backends, v Variant, stock map[string]int64) (st *stack, err error) {
	st = &stack{b: b, dir: b.Dir}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if st.dir == "" {
		if st.dir, err = os.MkdirTemp("", "idem-shop-"); err != nil {
			return nil, err
		}
		dir := st.dir
		st.cleanup = append(st.cleanup, func() { _ = os.RemoveAll(dir) })
	}
	run := randomID("")[:12]

	// Database.
	if b.Postgres == "" {
		st.d, st.driver = fsm.SQLite, "sqlite"
		st.dsn = sqlstore.SQLiteDSN(filepath.Join(st.dir, "shop-"+run+".db"))
		st.db = openCounted(&sqlite.Driver{}, st.dsn, &st.stmts)
		st.db.SetMaxOpenConns(4)
	} else {
		st.d, st.driver = fsm.Postgres, "pgx"
		schema := "shop_" + run
		admin, err := sql.Open("pgx", b.Postgres)
		if err != nil {
			return nil, err
		}
		if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
			admin.Close()
			return nil, fmt.Errorf("postgres: %w", err)
		}
		st.cleanup = append(st.cleanup, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			admin.Close()
		})
		if st.dsn, err = withParam(b.Postgres, "search_path", schema); err != nil {
			return nil, err
		}
		st.db = openCounted(stdlib.GetDefaultDriver(), st.dsn, &st.stmts)
		st.db.SetMaxOpenConns(16)
	}
	db := st.db
	st.cleanup = append(st.cleanup, func() { db.Close() })
	if err := migrate(ctx, st.db, st.d, v, stock); err != nil {
		return nil, err
	}

	// Redis.
	switch b.Redis {
	case "":
	case "private":
		if st.redis, err = startPrivateRedis(st.dir); err != nil {
			return nil, err
		}
		st.cleanup = append(st.cleanup, st.redis.kill)
		st.redisURL = st.redis.url()
	default:
		st.redisURL = b.Redis
	}
	if st.redisURL == "" && v == RejectWithoutRedis {
		// The embedded shop has no Redis; this variant needs one that is
		// down: a port nothing listens on.
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		st.redisURL = "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	}
	if st.redisURL != "" {
		opt, err := redis.ParseURL(st.redisURL)
		if err != nil {
			return nil, err
		}
		opt.ContextTimeoutEnabled = true
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 200*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
		opt.MaxRetries = -1
		st.rdb = redis.NewClient(opt)
		rdb := st.rdb
		st.cleanup = append(st.cleanup, func() { rdb.Close() })
	}

	// Idempotency records, tokens, locks, inbox.
	if st.durable, err = sqlstore.New(st.db, &sqlstore.Config{Dialect: st.d, Table: "idem_records"}); err != nil {
		return nil, err
	}
	if err := st.durable.Migrate(ctx); err != nil {
		return nil, err
	}
	prefix := "shop:" + run + ":"
	if st.rdb != nil {
		rs, err := redisstore.New(st.rdb, &redisstore.Config{Prefix: prefix + "idem:"})
		if err != nil {
			return nil, err
		}
		st.fast = rs
	} else {
		ms := memstore.New(&memstore.Config{SweepInterval: -1})
		st.fast = ms
	}
	if v == RejectWithoutRedis {
		st.records = st.fast // anti-pattern 7: the fast store is the only store
	} else {
		if st.tiered, err = tiered.New(st.fast, st.durable, &tiered.Config{FastTimeout: 200 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler)}); err != nil {
			return nil, err
		}
		st.records = st.tiered // its warnings are discarded: the storm kills Redis on purpose, and the report counts
	}
	ts, err := sqltoken.New(st.db, &sqltoken.Config{Dialect: st.d})
	if err != nil {
		return nil, err
	}
	if err := ts.Migrate(ctx); err != nil {
		return nil, err
	}
	if st.tokens, err = onetime.New(ts, nil); err != nil {
		return nil, err
	}
	switch {
	case st.rdb != nil && v != RejectWithoutRedis:
		if st.locker, err = redislock.New(st.rdb, &redislock.Config{Prefix: prefix + "lock:", TTL: time.Second, WaitTimeout: 2 * time.Second}); err != nil {
			return nil, err
		}
	case st.d == fsm.Postgres && v != LockWithoutConstraint:
		// LockWithoutConstraint shows what a lost lease costs when the
		// lock is trusted. pglock's session lock never runs out during a
		// pause (its loss is the session's), so that variant takes the
		// lease locker below, as it would a Redis lock.
		pl, err := pglock.New(st.db, &pglock.Config{Namespace: "shop-" + run, WaitTimeout: 2 * time.Second})
		if err != nil {
			return nil, err
		}
		if err := pl.Migrate(ctx); err != nil {
			return nil, err
		}
		st.locker = pl
	default:
		st.locker = newMemLocker(time.Second)
	}
	if st.ib, err = inbox.New(st.db, &inbox.Config{Dialect: st.d}); err != nil {
		return nil, err
	}
	if err := st.ib.Migrate(ctx); err != nil {
		return nil, err
	}
	if st.ob, err = openOutbox(st.db, st.d); err != nil {
		return nil, err
	}
	if err := st.ob.Migrate(ctx); err != nil {
		return nil, err
	}

	// Queue.
	switch {
	case b.Queue == "":
		st.queueKind = "memory"
		if st.mem, err = NewMemQueue(time.Second); err != nil {
			return nil, err
		}
		mem := st.mem
		st.cleanup = append(st.cleanup, func() { _ = mem.Close() })
		st.queueURL, st.pub = st.mem.URL(), st.mem
	case len(b.Queue) >= 4 && b.Queue[:4] == "nats":
		st.queueKind, st.queueURL, st.queueName = "nats", b.Queue, "SHOP_"+run
		q, err := openNATS(ctx, b.Queue, st.queueName, true, false)
		if err != nil {
			return nil, err
		}
		name := st.queueName
		st.cleanup = append(st.cleanup, func() {
			q.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			deleteNATSStream(ctx, b.Queue, name)
		})
		st.pub = q
		st.backlogFunc = func(ctx context.Context) (int, error) {
			c, err := q.js.Consumer(ctx, name, "shipping")
			if err != nil {
				return 0, err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return 0, err
			}
			return int(info.NumPending) + info.NumAckPending, nil
		}
	case len(b.Queue) >= 4 && b.Queue[:4] == "amqp":
		st.queueKind, st.queueURL, st.queueName = "amqp", b.Queue, "shop."+run
		q, err := openAMQP(b.Queue, st.queueName, true, false)
		if err != nil {
			return nil, err
		}
		name := st.queueName
		st.cleanup = append(st.cleanup, func() { q.Close(); deleteAMQPQueue(b.Queue, name) })
		st.pub = q
		st.backlogFunc = func(context.Context) (int, error) {
			// Ready messages only: AMQP does not count the unacked ones here,
			// hence the consumer's quiet period on top.
			q.mu.Lock()
			defer q.mu.Unlock()
			qi, err := q.ch.QueueDeclarePassive(name, true, false, false, false, nil)
			return qi.Messages, err
		}
	default:
		return nil, fmt.Errorf("shop: unknown queue %q (want nats:// or amqp://)", b.Queue)
	}
	return st, nil
}

// backlog is the number of shipping messages the broker still holds, as far
// as it tells.
func (s *stack) backlog(ctx context.Context) (int, error) {
	switch {
	case s.mem != nil:
		return s.mem.Pending(), nil
	case s.backlogFunc != nil:
		return s.backlogFunc(ctx)
	}
	return 0, nil
}

func (s *stack) childConfig(v Variant) childConfig {
	c := childConfig{Driver: s.driver, DSN: s.dsn, Postgres: s.d == fsm.Postgres, Queue: s.queueKind,
		QueueURL: s.queueURL, QueueName: s.queueName, Variant: v}
	if s.redis != nil || (s.b.Redis != "" && v != RejectWithoutRedis) {
		c.RedisURL = s.redisURL
	}
	return c
}

func withParam(dsn, k, v string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("shop: cannot parse the PostgreSQL URL")
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// privateRedis is a redis-server this process started, on a free port in
// the work directory: the only kind the storm may flush or kill.
type privateRedis struct {
	dir  string
	port int

	mu  sync.Mutex
	cmd *exec.Cmd
}

func startPrivateRedis(dir string) (*privateRedis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("shop: --redis private needs redis-server: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &privateRedis{dir: filepath.Join(dir, "redis-"+strconv.Itoa(port)), port: port}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	return r, r.start()
}

func (r *privateRedis) url() string { return "redis://127.0.0.1:" + strconv.Itoa(r.port) + "/0" }

func (r *privateRedis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(r.port), 200*time.Millisecond)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			if string(buf[:n]) == "+PONG\r\n" {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("shop: private redis-server did not come up")
}

// kill stops the server with SIGKILL; its data is gone.
func (r *privateRedis) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	killProcessGroup(r.cmd)
	_ = r.cmd.Wait()
	r.cmd = nil
}
