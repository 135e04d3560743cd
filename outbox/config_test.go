package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/outbox"
)

type noPublisher struct{}

func (noPublisher) Publish(context.Context, []outbox.Message) []error { return nil }

// TestConfigErrors: every option New, NewRelay and Enqueue reject is
// reported as a *idem.ConfigError of package outbox naming it. New does no
// I/O, so the *sql.DB is never used.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := configtest.NoDB(t)
	for field, cfg := range map[string]*outbox.Config{
		"Config.Dialect": {},
		"Config.Table":   {Dialect: outbox.Postgres, Table: "a.b.c"},
	} {
		_, err := outbox.New(db, cfg)
		configtest.Want(t, err, "outbox", field)
	}
	_, err := outbox.New(nil, &outbox.Config{Dialect: outbox.SQLite})
	configtest.Want(t, err, "outbox", "db")

	o, err := outbox.New(db, &outbox.Config{Dialect: outbox.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.NewRelay(nil, nil)
	configtest.Want(t, err, "outbox", "pub")
	_, err = o.NewRelay(noPublisher{}, &outbox.RelayConfig{MinBackoff: time.Minute, MaxBackoff: time.Second})
	configtest.Want(t, err, "outbox", "RelayConfig.MinBackoff")
	err = o.Enqueue(context.Background(), nil, outbox.Message{ID: "m", Destination: "d"})
	configtest.Want(t, err, "outbox", "tx")
}
