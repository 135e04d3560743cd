package onetime_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// Issue a token for a session's form, then consume it on submit: the first
// submit wins, the double click is refused, and another session cannot use
// the token at all.
func Example() {
	dir, _ := os.MkdirTemp("", "onetime")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	store, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	tokens, err := onetime.New(store, nil)
	if err != nil {
		panic(err)
	}

	tok, err := tokens.Issue(ctx, "session:alice") // render into the form
	if err != nil {
		panic(err)
	}
	fmt.Println("foreign session:", tokens.Consume(ctx, "session:mallory", tok))
	fmt.Println("first submit:   ", tokens.Consume(ctx, "session:alice", tok))
	err = tokens.Consume(ctx, "session:alice", tok)
	fmt.Println("second submit:  ", err, errors.Is(err, onetime.ErrUsed))
	fmt.Println("forged token:   ", tokens.Consume(ctx, "session:alice", "not-a-token"))
	// Output:
	// foreign session: onetime: token belongs to another scope
	// first submit:    <nil>
	// second submit:   onetime: token already used true
	// forged token:    onetime: unknown token
}

// Take and Restore: the work after the token failed, so the token is given
// back and the user can submit the same form again.
func ExampleTokens_Take() {
	dir, _ := os.MkdirTemp("", "onetime")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	defer db.Close()
	ctx := context.Background()
	store, _ := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	tokens, _ := onetime.New(store, nil)
	tok, _ := tokens.Issue(ctx, "session:bob")

	receipt, err := tokens.Take(ctx, "session:bob", tok, onetime.NewUse())
	fmt.Println("take:", err)
	chargeErr := errors.New("card declined by a flaky gateway")
	if chargeErr != nil {
		fmt.Println("restore:", tokens.Restore(ctx, receipt))
	}
	fmt.Println("retry:", tokens.Consume(ctx, "session:bob", tok))
	// Output:
	// take: <nil>
	// restore: <nil>
	// retry: <nil>
}
