package natsoutbox_test

import (
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := natsoutbox.New(nil, nil)
	configtest.Want(t, err, "natsoutbox", "js")
}
