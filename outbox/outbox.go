package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/sqlerr"
)

// Dialect names the SQL database behind an Outbox; it is the same type as
// inbox.Dialect and sqlstore's dialects.
type Dialect = sqldialect.Dialect

const (
	// Postgres is PostgreSQL through a database/sql driver (pgx's "pgx").
	Postgres Dialect = sqldialect.Postgres
	// MySQL is MySQL 8 or MariaDB 10.6+ (SKIP LOCKED) through
	// go-sql-driver/mysql.
	MySQL Dialect = sqldialect.MySQL
	// SQLite is SQLite ≥ 3.35 through modernc.org/sqlite. One relay works at
	// a time (a lease); open it with WAL and a busy timeout.
	SQLite Dialect = sqldialect.SQLite
)

// MaxFieldLen is the longest ID, Destination and OrderingKey, in bytes.
const MaxFieldLen = 255

var (
	// ErrInvalidMessage is wrapped by Enqueue for a message it refuses
	// before writing (empty or oversized ID or Destination, bad headers).
	ErrInvalidMessage = errors.New("outbox: invalid message")
	// ErrDuplicateID means a message with this ID was already enqueued
	// (and not yet swept). The caller's transaction is then unusable on
	// PostgreSQL: roll it back.
	ErrDuplicateID = errors.New("outbox: duplicate message id")
)

// Message is one message to publish after the business transaction commits.
type Message struct {
	// ID is the message's stable, unique identity: the broker's dedup id
	// (Nats-Msg-Id, AMQP message-id, a Kafka header) and the key a
	// consumer's inbox deduplicates on. Required, at most MaxFieldLen bytes.
	// Derive it from the business action ("order-42/paid"), so that a
	// retried business transaction enqueues the same ID.
	ID string
	// Destination says where it goes, in the publisher's terms: a subject,
	// "exchange/routing-key" or a topic. Required, at most MaxFieldLen bytes.
	Destination string
	// OrderingKey groups messages that must be published in commit order,
	// one at a time (usually the aggregate's id). Empty means no ordering:
	// the message is published as soon as the relay gets to it.
	OrderingKey string
	Payload     []byte
	Headers     map[string]string
}

func (m *Message) validate() error {
	check := func(what, v string, required bool) error {
		switch {
		case v == "" && required:
			return fmt.Errorf("%w: %s is empty", ErrInvalidMessage, what)
		case len(v) > MaxFieldLen:
			return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidMessage, what, MaxFieldLen)
		case !utf8.ValidString(v):
			return fmt.Errorf("%w: %s is not UTF-8", ErrInvalidMessage, what)
		}
		return nil
	}
	if err := check("ID", m.ID, true); err != nil {
		return err
	}
	if err := check("Destination", m.Destination, true); err != nil {
		return err
	}
	return check("OrderingKey", m.OrderingKey, false)
}

// Execer is what Enqueue needs from the caller's transaction. *sql.Tx and
// *sql.Conn have it; a pgx.Tx needs a one-method adapter.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Config configures an Outbox.
type Config struct {
	Dialect Dialect // required
	// Table is the outbox table, default "idem_outbox"; "schema.table" is
	// allowed on PostgreSQL and MySQL. The tables Table+"_keys",
	// Table+"_lease" and Table+"_migrations" sit beside it.
	Table string
	// CheckFunc, when set, is called by Enqueue with each message after its
	// own checks and before writing it; an error refuses the message,
	// wrapped with ErrInvalidMessage, and writes nothing. A publisher
	// offers one for the refusals it can see in the message alone
	// (natsoutbox.Check: a NATS control header, a subject that is not
	// valid), so that the business transaction is told at once instead of
	// the relay parking the message later. It must not block.
	CheckFunc func(Message) error
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Table == "" {
		out.Table = "idem_outbox"
	}
	return out
}

func (c Config) validate() error {
	if err := c.Dialect.Check("outbox", "Config.Dialect"); err != nil {
		return err
	}
	if err := sqldialect.CheckIdent(c.Table, c.Dialect != SQLite); err != nil {
		return configError("Config.Table", err.Error())
	}
	return nil
}

// Outbox writes messages into the caller's transaction and owns the table
// the relays read.
type Outbox struct {
	db  *sql.DB
	cfg Config
	st  statements

	noIdleTimeout atomic.Bool // MySQL: the server has no idle_transaction_timeout (MariaDB has)
}

// New returns an Outbox on db. db is used by Migrate, the relays and the
// operator methods; Enqueue uses the caller's transaction only.
func New(db *sql.DB, cfg *Config) (*Outbox, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, configError("db", "nil *sql.DB")
	}
	return &Outbox{db: db, cfg: c, st: buildStatements(c.Dialect, c.Table)}, nil
}

// Enqueue writes m in tx, the caller's business transaction: m is published
// if and only if tx commits. With an OrderingKey it also takes that key's
// row lock until tx ends, so two transactions enqueueing for one key take
// turns and the relay sees their messages in commit order.
func (o *Outbox) Enqueue(ctx context.Context, tx Execer, m Message) error {
	if tx == nil {
		return configError("tx", "nil")
	}
	if err := m.validate(); err != nil {
		return err
	}
	if o.cfg.CheckFunc != nil {
		if err := o.cfg.CheckFunc(m); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
	}
	headers := "{}"
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return fmt.Errorf("%w: headers: %w", ErrInvalidMessage, err)
		}
		headers = string(b)
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	var err error
	switch {
	case m.OrderingKey == "":
		_, err = tx.ExecContext(ctx, o.st.insertUnordered, m.ID, m.Destination, payload, headers)
	case o.st.bumpKey == "": // PostgreSQL: one statement
		_, err = tx.ExecContext(ctx, o.st.insertOrdered, m.ID, m.Destination, m.OrderingKey, payload, headers)
	default:
		if _, err = tx.ExecContext(ctx, o.st.bumpKey, m.OrderingKey); err == nil {
			_, err = tx.ExecContext(ctx, o.st.insertOrdered, m.ID, m.Destination, m.OrderingKey, payload, headers, m.OrderingKey)
		}
	}
	if err != nil {
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: %q", ErrDuplicateID, m.ID)
		}
		return fmt.Errorf("outbox: enqueue: %w", err)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	if sqlerr.SQLState(err) == "23505" {
		return true
	}
	if n, ok := sqlerr.MySQLNumber(err); ok && n == 1062 {
		return true
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		c := coded.Code()
		return c == 2067 || c == 1555 // SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY
	}
	return false
}

// configError is the *idem.ConfigError of package outbox: New, NewRelay and
// Enqueue (a nil tx) report bad configuration with it, and in no other way.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "outbox", Field: field, Reason: reason}
}
