package storeurl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/tiered"
)

// Kind is the backend a DSN names.
type Kind string

// Backends.
const (
	Memory   Kind = "memory"
	SQLite   Kind = "sqlite"
	Postgres Kind = "postgres"
	MySQL    Kind = "mysql"
	Redis    Kind = "redis"
)

// DSN is a parsed store address.
type DSN struct {
	Kind Kind
	// Table is the records table of an SQL store (sqlstore's Config.Table;
	// empty: sqlstore.DefaultTable). The caller sets it; Parse leaves it
	// empty.
	Table    string
	redacted string
	secrets  []string // the password and secret parameters, to scrub from driver errors
	driver   string   // the database/sql driver's DSN, or the path for SQLite
	redis    *redis.Options
}

// String returns the DSN with its password, and the values of query
// parameters that carry secrets (password=, sslpassword= and the like),
// replaced by "xxxxx".
func (d DSN) String() string { return d.redacted }

// dsnError is a DSN that could not be parsed or opened: a *idem.ConfigError
// for Field "DSN" whose reason quotes dsn, which must be redacted already.
// Its text never contains the password.
func dsnError(dsn, reason string) error {
	return &idem.ConfigError{Field: "DSN", Reason: strconv.Quote(dsn) + ": " + reason}
}

// Parse validates s and returns the DSN. It does no I/O.
func Parse(s string) (DSN, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || scheme == "" {
		// Not shown: a string without a scheme may be anything, a password
		// pasted in the wrong place included.
		return DSN{}, dsnError("…", "no scheme; use memory:, sqlite:PATH, postgres://…, mysql://… or redis://…")
	}
	switch strings.ToLower(scheme) {
	case "memory", "mem":
		if rest != "" {
			return DSN{}, dsnError(s, "memory: takes no address")
		}
		return DSN{Kind: Memory, redacted: "memory:"}, nil
	case "sqlite", "sqlite3":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return DSN{}, dsnError(s, "sqlite: needs a file path, e.g. sqlite:idem.db")
		}
		if strings.ContainsAny(path, "?#") {
			return DSN{}, dsnError(s, "sqlite: path must not contain '?' or '#'")
		}
		if path == ":memory:" {
			// Each connection of the pool would open its own empty
			// database: concurrent requests would find no tables, or
			// each other's records missing.
			return DSN{}, dsnError(s, "sqlite: :memory: gives every pooled connection its own empty database; use memory: for an in-process store, or a file path")
		}
		return DSN{Kind: SQLite, redacted: "sqlite:" + path, driver: sqlstore.SQLiteDSN(path)}, nil
	case "postgres", "postgresql":
		u, err := parseURL(s)
		if err != nil {
			return DSN{}, err
		}
		if u.Host == "" {
			return DSN{}, dsnError(redactURL(u), "missing host")
		}
		return DSN{Kind: Postgres, redacted: redactURL(u), secrets: urlSecrets(u), driver: s}, nil
	case "mysql", "mariadb":
		u, err := parseURL(s)
		if err != nil {
			return DSN{}, err
		}
		red := redactURL(u)
		if u.Host == "" {
			return DSN{}, dsnError(red, "missing host")
		}
		db := strings.TrimPrefix(u.Path, "/")
		if db == "" || strings.Contains(db, "/") {
			return DSN{}, dsnError(red, "missing database name (mysql://user:pass@host:port/db)")
		}
		cfg := mysql.NewConfig()
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net = "tcp"
		cfg.Addr = u.Host
		if u.Port() == "" {
			cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg.DBName = db
		cfg.Timeout = 5 * time.Second
		for k, vs := range u.Query() {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = vs[len(vs)-1]
		}
		return DSN{Kind: MySQL, redacted: red, secrets: urlSecrets(u), driver: cfg.FormatDSN()}, nil
	case "redis", "rediss":
		u, err := parseURL(s)
		if err != nil {
			return DSN{}, err
		}
		red := redactURL(u)
		secrets := urlSecrets(u)
		opt, err := redis.ParseURL(s)
		if err != nil {
			return DSN{}, dsnError(red, scrub(err.Error(), secrets))
		}
		if opt.Password != "" {
			secrets = append(secrets, opt.Password)
		}
		return DSN{Kind: Redis, redacted: red, secrets: secrets, redis: opt}, nil
	}
	// Only the scheme is shown: who knows where an unknown one keeps its
	// secrets.
	return DSN{}, dsnError(scheme+":…", fmt.Sprintf("unknown scheme %q; use memory:, sqlite:PATH, postgres://…, mysql://… or redis://…", scheme))
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		reason := err.Error()
		if errors.As(err, &ue) {
			reason = ue.Err.Error()
		}
		return nil, dsnError(redactOpaque(s), "not a valid URL: "+reason)
	}
	if u.Opaque != "" {
		// scheme:rest without "//": rest is not a host, and may be anything.
		return nil, dsnError(u.Scheme+":…", "not a valid URL: want "+u.Scheme+"://host…")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, dsnError(redactURL(u), fmt.Sprintf("not a valid URL: port %q is not in 1-65535", p))
		}
	}
	return u, nil
}

// secretParam reports whether a query parameter carries a secret:
// password=, sslpassword=, passwd=, pwd=, and anything naming a secret,
// token or credential, in any case.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"pass", "pwd", "secret", "token", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	switch n {
	case "auth", "apikey", "api_key", "key":
		return true
	}
	return false
}

// redactQuery replaces the values of secret parameters in a raw query (or
// any "&"-separated k=v text) by "xxxxx", keeping everything else as it is.
func redactQuery(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if secretParam(name) {
			parts[i] = k + "=xxxxx"
		}
	}
	return strings.Join(parts, "&")
}

// redactURL is u.Redacted() with secret query parameters hidden too.
func redactURL(u *url.URL) string {
	c := *u
	c.RawQuery = redactQuery(u.RawQuery)
	c.ForceQuery = false
	return c.Redacted()
}

// urlSecrets returns the password of u's user-info and the values of its
// secret query parameters.
func urlSecrets(u *url.URL) []string {
	var out []string
	if pw, ok := u.User.Password(); ok && pw != "" {
		out = append(out, pw)
	}
	for k, vs := range u.Query() {
		if secretParam(k) {
			for _, v := range vs {
				if v != "" {
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// redactOpaque hides, in a string that did not parse as a URL, whatever
// sits between "://user:" and "@", and the values of secret query
// parameters.
func redactOpaque(s string) string {
	if q := strings.IndexByte(s, '?'); q >= 0 {
		s = s[:q+1] + redactQuery(s[q+1:])
	}
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	at := strings.LastIndex(s, "@")
	if at < i {
		return s
	}
	userinfo := s[i+3 : at]
	if c := strings.IndexByte(userinfo, ':'); c >= 0 {
		return s[:i+3] + userinfo[:c] + ":xxxxx" + s[at:]
	}
	return s
}

// scrub replaces every secret, as it is and URL-escaped, in msg.
func scrub(msg string, secrets []string) string {
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
		if esc := url.QueryEscape(secret); esc != secret {
			msg = strings.ReplaceAll(msg, esc, "xxxxx")
		}
		if esc := url.PathEscape(secret); esc != secret {
			msg = strings.ReplaceAll(msg, esc, "xxxxx")
		}
	}
	return msg
}

// Handle is an opened store with what the command line does with it.
type Handle struct {
	DSN   DSN
	Store idem.Store
	// DB and Dialect are the SQL pool and its dialect, for the tables
	// other packages keep beside the records (outbox); nil and zero for
	// memory and Redis.
	DB      *sql.DB
	Dialect sqlstore.Dialect
	close   []func() error
	// migrate creates the schema (SQL) and verifies the server (Redis
	// eviction policy). Nil for memory.
	migrate func(ctx context.Context) error
	// reporter reads the server's replication: the store itself, or for
	// a tiered store its durable store. Nil when the store cannot.
	reporter idem.ReplicationReporter
}

// Options are the settings of the opened store that do not come from the
// DSN.
type Options struct {
	// AllowAsyncReplication lets a SQL store grant claims while its server
	// replicates asynchronously (sqlstore.Config.AllowAsyncReplication).
	AllowAsyncReplication bool
	// SynchronousCommit is the level a PostgreSQL store pins on its
	// writes (sqlstore.Config.SynchronousCommit); "" means on. Other
	// kinds refuse a non-empty value.
	SynchronousCommit string
	// WaitReplicas and WaitTimeout are a Redis store's
	// redisstore.Config.WaitReplicas and WaitTimeout. Other kinds refuse a
	// positive WaitReplicas.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// Open opens the store d names with the default Options. It connects
// lazily: the first I/O happens in Prepare or the first store call.
func Open(d DSN) (*Handle, error) { return OpenWith(d, Options{}) }

// OpenWith is Open with o.
func OpenWith(d DSN, o Options) (*Handle, error) {
	if o.SynchronousCommit != "" && d.Kind != Postgres {
		return nil, fmt.Errorf("store %s: the synchronous_commit level applies to PostgreSQL only", d)
	}
	if o.WaitReplicas > 0 && d.Kind != Redis {
		return nil, fmt.Errorf("store %s: waiting for replicas (WAIT) applies to Redis only", d)
	}
	h := &Handle{DSN: d}
	switch d.Kind {
	case Memory:
		m := memstore.New(nil)
		h.Store = m
		h.close = append(h.close, m.Close)
	case SQLite, Postgres, MySQL:
		drv, dialect := map[Kind]string{SQLite: "sqlite", Postgres: "pgx", MySQL: "mysql"}[d.Kind], map[Kind]sqlstore.Dialect{SQLite: sqlstore.SQLite, Postgres: sqlstore.Postgres, MySQL: sqlstore.MySQL}[d.Kind]
		db, err := sql.Open(drv, d.driver)
		if err != nil {
			return nil, dsnError(d.redacted, scrub(err.Error(), d.secrets))
		}
		if d.Kind == SQLite {
			db.SetMaxOpenConns(8) // one writer at a time anyway; readers share WAL
		}
		s, err := sqlstore.New(db, &sqlstore.Config{Dialect: dialect, AllowAsyncReplication: o.AllowAsyncReplication, SynchronousCommit: o.SynchronousCommit, Table: d.Table})
		if err != nil {
			db.Close()
			return nil, dsnError(d.redacted, scrub(err.Error(), d.secrets))
		}
		h.Store, h.DB, h.Dialect, h.reporter = s, db, dialect, s
		h.close = append(h.close, db.Close)
		h.migrate = s.Migrate
	case Redis:
		c, err := openRueidis(d.redis)
		if err != nil {
			return nil, dsnError(d.redacted, scrub(err.Error(), d.secrets))
		}
		s, err := redisstore.NewRueidis(c, &redisstore.Config{WaitReplicas: o.WaitReplicas, WaitTimeout: o.WaitTimeout, AllowAsyncReplication: o.AllowAsyncReplication})
		if err != nil {
			c.Close()
			return nil, dsnError(d.redacted, scrub(err.Error(), d.secrets))
		}
		h.Store = s
		h.reporter, _ = any(s).(idem.ReplicationReporter)
		h.close = append(h.close, func() error { c.Close(); return nil })
		h.migrate = s.Check
	default:
		return nil, dsnError(d.redacted, "unsupported store kind")
	}
	return h, nil
}

// openRueidis returns a rueidis client on the server opt (go-redis's
// reading of the DSN) names: the same address, database, credentials, TLS
// and timeouts (rueidisOption), with a 2s dial timeout unless
// the DSN sets one. A redis:// DSN names one server, as it did for
// go-redis's NewClient: the client is a single-node one (no cluster
// discovery). A server that does not answer yet is no error here: rueidis
// keeps the client and dials again on the first call, so Open stays lazy
// and Prepare reports the outage as unavailable (the proxy starts with its
// cache down).
func openRueidis(opt *redis.Options) (rueidis.Client, error) {
	o := rueidisOption(opt)
	if opt.DialTimeout == 0 {
		o.Dialer.Timeout = 2 * time.Second
	}
	o.ForceSingleClient = true
	c, err := rueidis.NewClient(o)
	if c == nil {
		return nil, err
	}
	return c, nil // a dial error: the client dials again when used
}

// OpenTiered puts cache in front of store: cache answers duplicates, store
// judges every first claim (see package tiered).
func OpenTiered(cache, store *Handle) (*Handle, error) {
	t, err := tiered.New(cache.Store, store.Store, nil)
	if err != nil {
		return nil, err
	}
	// The durable store judges every claim, so its replication is the
	// one that decides what a failover keeps.
	reporter, _ := any(t).(idem.ReplicationReporter)
	if reporter == nil {
		reporter = store.reporter
	}
	return &Handle{
		DSN:      store.DSN,
		Store:    t,
		reporter: reporter,
		close:    append(append([]func() error{}, cache.close...), store.close...),
		migrate: func(ctx context.Context) error {
			if err := cache.Prepare(ctx); err != nil {
				return err
			}
			return store.Prepare(ctx)
		},
	}, nil
}

// Prepare creates the schema if needed (SQL: embedded migrations, safe to run
// concurrently) and checks the server (Redis: refuses an evicting
// maxmemory-policy). Errors are scrubbed of the password.
func (h *Handle) Prepare(ctx context.Context) error {
	if h.migrate == nil {
		return nil
	}
	if err := h.migrate(ctx); err != nil {
		return h.Wrap(err)
	}
	return nil
}

// Replication reads how the store's server replicates (see
// idem.ReplicationReporter). ok is false for a store that cannot tell (a
// memory store). Errors are scrubbed of the password.
func (h *Handle) Replication(ctx context.Context) (rep idem.Replication, ok bool, err error) {
	if h.reporter == nil {
		return idem.Replication{}, false, nil
	}
	rep, err = h.reporter.Replication(ctx)
	return rep, true, h.Wrap(err)
}

// Wrap returns err with the DSN's password scrubbed from its text. It keeps
// errors.Is working for the idem sentinels.
func (h *Handle) Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &scrubbed{msg: scrub(err.Error(), h.DSN.secrets), err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// Close releases connections and background goroutines.
func (h *Handle) Close() error {
	var errs []error
	for _, c := range h.close {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}
