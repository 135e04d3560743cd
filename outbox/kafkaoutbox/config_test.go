package kafkaoutbox_test

import (
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/outbox/kafkaoutbox"
)

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := kafkaoutbox.New(nil)
	configtest.Want(t, err, "kafkaoutbox", "cl")
}
