package idem_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
)

func TestConfigErrorText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  *idem.ConfigError
		want string
	}{
		{&idem.ConfigError{Field: "BeginRequest.Lease", Reason: "must be at least 1ms"}, "idem: invalid BeginRequest.Lease: must be at least 1ms"},
		{&idem.ConfigError{Package: "amqpinbox", Field: "Config.Prefetch", Reason: "must be at least 1, got 0"}, "amqpinbox: invalid Config.Prefetch: must be at least 1, got 0"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%#v: %q, want %q", *c.err, got, c.want)
		}
	}
}

// TestConfigErrors: the root package's rejected values are ConfigErrors
// of package "" naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	key := idem.MustKey("", "k")
	for field, r := range map[string]idem.BeginRequest{
		"BeginRequest.Lease":     {Key: key, Lease: time.Microsecond},
		"BeginRequest.Retention": {Key: key, Lease: time.Hour, Retention: time.Minute},
	} {
		_, err := r.Normalize()
		configtest.Want(t, err, "", field)
	}
	configtest.Want(t, idem.Resolution{}.Validate(), "", "Resolution.Fence")
	configtest.Want(t, idem.Resolution{Fence: 1, Release: true, Result: []byte("x")}.Validate(), "", "Resolution.Result")
	_, err := idem.FingerprintJSONPointers([]byte(`{}`), "p")
	configtest.Want(t, err, "", "pointers")
	_, err = idem.FingerprintJSONPointers([]byte(`{}`), "p", "amount")
	configtest.Want(t, err, "", "pointer")
	_, err = idem.KeyFromJSON("", []byte(`{"id":"x"}`), "id")
	configtest.Want(t, err, "", "pointer")
}
