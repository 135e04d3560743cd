package inbox

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
)

// TestConfigErrors: every option New, NewSweeper and the Process methods
// reject is reported as a *idem.ConfigError of package inbox naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := configtest.NoDB(t)
	for field, cfg := range map[string]*Config{
		"Config.Dialect":                 {},
		"Config.Table":                   {Dialect: SQLite, Table: "main.inbox"},
		"Config.Retention":               {Dialect: SQLite, Retention: -time.Second},
		"Config.FastPathBackoff":         {Dialect: SQLite, FastPathBackoff: -time.Second},
		"Config.EarlyBackoff":            {Dialect: SQLite, EarlyBackoff: -time.Second},
		"Config.TxOptions":               {Dialect: SQLite, TxOptions: &sql.TxOptions{ReadOnly: true}},
		"Config.Bloom.Window":            {Dialect: SQLite, Bloom: &BloomConfig{Window: -time.Second}},
		"Config.Bloom.Generations":       {Dialect: SQLite, Bloom: &BloomConfig{Generations: 65}},
		"Config.Bloom.FalsePositiveRate": {Dialect: SQLite, Bloom: &BloomConfig{FalsePositiveRate: 0.6}},
	} {
		_, err := New(db, cfg)
		configtest.Want(t, err, "inbox", field)
	}
	_, err := New(db, &Config{Dialect: MySQL, Table: strings.Repeat("t", 49)})
	configtest.Want(t, err, "inbox", "Config.Table")
	_, err = New(db, nil)
	configtest.Want(t, err, "inbox", "Config.Dialect")
	_, err = New(nil, &Config{Dialect: SQLite})
	configtest.Want(t, err, "inbox", "db")

	ib, err := New(db, &Config{Dialect: SQLite})
	if err != nil {
		t.Fatal(err)
	}
	for field, cfg := range map[string]*SweeperConfig{
		"SweeperConfig.Interval":  {Interval: -time.Second},
		"SweeperConfig.BatchSize": {BatchSize: 100_001},
	} {
		_, err := NewSweeper(ib, cfg)
		configtest.Want(t, err, "inbox", field)
	}
	_, err = NewSweeper(nil, nil)
	configtest.Want(t, err, "inbox", "ib")

	ctx := context.Background()
	_, err = ib.Process(ctx, "c", "m", nil)
	configtest.Want(t, err, "inbox", "h")
	_, err = ib.ProcessTx(ctx, nil, "c", "m", func(context.Context, *sql.Tx) error { return nil })
	configtest.Want(t, err, "inbox", "tx")
	_, err = ib.ProcessIn(ctx, db, "c", "m", nil)
	configtest.Want(t, err, "inbox", "fn")
}
