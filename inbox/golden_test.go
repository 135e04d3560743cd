package inbox_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// TestGoldenStoredMessageIDs pins the stored form of message ids (kept as
// they are, or hashed when long or binary): a change would make every
// processed message new again after an upgrade (docs/stability.md).
func TestGoldenStoredMessageIDs(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for name, id := range map[string]string{
		"plain":     "order-1:paid",
		"max":       strings.Repeat("m", inbox.MaxIDBytes),
		"too long":  strings.Repeat("m", inbox.MaxIDBytes+1),
		"nul":       "a\x00b",
		"non utf-8": "\xff\xfe",
	} {
		got[name] = inbox.StoredMessageID(id)
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/message-ids-v1.json", append(data, '\n'))
}

// TestGoldenMessageKeys pins MessageKey's keys (their digests, which the
// stores keep): a change would make a message redelivered across an
// upgrade start its steps over (docs/stability.md).
func TestGoldenMessageKeys(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for name, id := range map[string]string{
		"plain":     "order-1:paid",
		"space":     "order 1",
		"too long":  strings.Repeat("m", inbox.MaxIDBytes+1),
		"non utf-8": "\xff\xfe",
	} {
		k, err := inbox.MessageKey("billing", id)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = k.Digest().String()
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/message-keys-v1.json", append(data, '\n'))
}
