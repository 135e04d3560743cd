package formtoken_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// TestConfigErrors: every option and argument New rejects is reported as a
// *idem.ConfigError of package formtoken naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	store, err := sqltoken.New(configtest.NoDB(t), &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := onetime.New(store, &onetime.Config{TTL: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	records := memstore.New(nil)
	defer records.Close()
	scope := func(*http.Request) (string, error) { return "s", nil }
	_, err = formtoken.New(tokens, records, &formtoken.Config{})
	configtest.Want(t, err, "formtoken", "Config.ScopeFunc")
	_, err = formtoken.New(tokens, records, &formtoken.Config{ScopeFunc: scope}) // 24h records, 48h tokens
	configtest.Want(t, err, "formtoken", "Config.HTTP.Retention")
	_, err = formtoken.New(nil, records, &formtoken.Config{ScopeFunc: scope})
	configtest.Want(t, err, "formtoken", "tokens")
	_, err = formtoken.New(tokens, nil, &formtoken.Config{ScopeFunc: scope})
	configtest.Want(t, err, "formtoken", "records")
	if _, err := formtoken.New(tokens, records, &formtoken.Config{ScopeFunc: scope, HTTP: &httpidem.Config{Retention: 49 * time.Hour}}); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
