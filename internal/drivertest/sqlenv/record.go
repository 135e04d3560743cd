package sqlenv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
)

// ErrRecorded is what a Recorder answers to every statement it is given.
var ErrRecorded = errors.New("sqlenv: statement recorded, not run")

// Recorder is a *sql.DB that runs nothing: every statement a caller sends
// through it (Exec, Query, Prepare, inside a transaction or not) is noted
// and answered with ErrRecorded. Transactions begin, commit and roll back
// without a word. Tests use it to read the statement text a package sends,
// exactly as it sends it, without reaching into the package: call the
// operation once on a Recorder, then read Statements.
type Recorder struct {
	DB *sql.DB

	mu    sync.Mutex
	stmts []string
}

// NewRecorder returns a Recorder whose DB is closed when the caller closes it.
func NewRecorder() *Recorder {
	r := &Recorder{}
	r.DB = sql.OpenDB(recConnector{r})
	return r
}

// Statements returns the statements recorded so far, oldest first.
func (r *Recorder) Statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.stmts...)
}

func (r *Recorder) note(query string) error {
	r.mu.Lock()
	r.stmts = append(r.stmts, query)
	r.mu.Unlock()
	return ErrRecorded
}

type recConnector struct{ r *Recorder }

func (c recConnector) Connect(context.Context) (driver.Conn, error) { return recConn(c), nil }
func (c recConnector) Driver() driver.Driver                        { return recDriver(c) }

type recDriver struct{ r *Recorder }

func (d recDriver) Open(string) (driver.Conn, error) { return recConn(d), nil }

type recConn struct{ r *Recorder }

func (c recConn) Prepare(query string) (driver.Stmt, error) { return nil, c.r.note(query) }
func (c recConn) Close() error                              { return nil }
func (c recConn) Begin() (driver.Tx, error)                 { return recTx{}, nil }

func (c recConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return recTx{}, nil
}

func (c recConn) ExecContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Result, error) {
	return nil, c.r.note(query)
}

func (c recConn) QueryContext(_ context.Context, query string, _ []driver.NamedValue) (driver.Rows, error) {
	return nil, c.r.note(query)
}

// CheckNamedValue accepts every argument as it is: the recorder converts
// nothing and sends nothing.
func (c recConn) CheckNamedValue(*driver.NamedValue) error { return nil }

type recTx struct{}

func (recTx) Commit() error   { return nil }
func (recTx) Rollback() error { return nil }
