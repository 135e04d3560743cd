package outbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDriverOrBrokerDeps: importing outbox drags in no SQL driver, no
// broker client and no net/http: database/sql and the caller's driver are
// all it needs; the publishers live in their own modules.
func TestNoDriverOrBrokerDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/idemkit/idem/outbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/jackc/", "github.com/go-sql-driver/", "modernc.org/", "github.com/nats-io/",
			"github.com/rabbitmq/", "github.com/twmb/", "github.com/redis/", "net/http"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("outbox depends on %s", dep)
			}
		}
	}
}
