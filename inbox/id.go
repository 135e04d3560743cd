package inbox

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// MaxIDBytes is the longest consumer name, and the longest message ID stored
// as is. Longer message IDs are stored hashed (see StoredMessageID).
const MaxIDBytes = 255

// hashedPrefix marks a message ID that is stored as its SHA-256.
const hashedPrefix = "sha256:"

// StoredMessageID returns the value the dedup table holds for messageID:
// messageID itself when it is valid UTF-8 without NUL bytes and at most
// MaxIDBytes long, otherwise "sha256:" followed by the hex SHA-256 of its
// bytes (71 bytes). Hashing keeps every broker ID usable (Kafka headers are
// bytes, some IDs are long) on all three databases; PostgreSQL text cannot
// hold NUL or invalid UTF-8 at all.
//
// A literal ID that happens to equal the hashed form of another ID of the same
// consumer is treated as that ID. Producing one requires knowing the other ID,
// and whoever can inject an ID into the consumer's stream can already send the
// other ID itself, so this opens no new attack.
func StoredMessageID(messageID string) string {
	if len(messageID) <= MaxIDBytes && utf8.ValidString(messageID) && !strings.ContainsRune(messageID, 0) {
		return messageID
	}
	return hashedID(messageID)
}

// hashedID is "sha256:" followed by the hex SHA-256 of messageID's bytes.
func hashedID(messageID string) string {
	sum := sha256.Sum256([]byte(messageID))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// messageScope begins the scope of every MessageKey; NUL cannot occur in
// a consumer name.
const messageScope = "inbox\x00"

// MessageKey returns the idem key of messageID for consumer: the key under
// which a handler runs the message's work with step.Do (or idem.Do), so
// that a redelivery after a crash in the middle of the handler finds the
// operation's finished steps (or its result) instead of starting over.
// The scope is "inbox", a NUL byte and consumer: the keys of two consumers
// never meet, nor those of an HTTP caller unless its ScopeFunc returns that
// very string. The ID is messageID when idem accepts it (1 to
// idem.MaxKeyLen visible ASCII characters), otherwise "sha256:" followed
// by the hex SHA-256 of its bytes. The error matches ErrInvalidID, for
// the consumer names and message IDs Process refuses.
func MessageKey(consumer, messageID string) (idem.Key, error) {
	if err := checkConsumer(consumer); err != nil {
		return idem.Key{}, err
	}
	if messageID == "" {
		return idem.Key{}, fmt.Errorf("%w: message ID is empty", ErrInvalidID)
	}
	id := messageID
	if idem.ValidateID(id) != nil {
		id = hashedID(messageID)
	}
	return idem.NewKey(messageScope+consumer, id)
}

func checkConsumer(consumer string) error {
	switch {
	case consumer == "":
		return fmt.Errorf("%w: consumer is empty", ErrInvalidID)
	case len(consumer) > MaxIDBytes:
		return fmt.Errorf("%w: consumer is %d bytes, the limit is %d", ErrInvalidID, len(consumer), MaxIDBytes)
	case !utf8.ValidString(consumer) || strings.ContainsRune(consumer, 0):
		return fmt.Errorf("%w: consumer must be UTF-8 text without NUL bytes", ErrInvalidID)
	}
	return nil
}

// key is one (consumer, message) pair after validation.
type key struct {
	consumer string
	stored   string   // message ID as stored in the table
	digest   [32]byte // SHA-256 over table, consumer and stored ID: Bloom and fast-path key
}

func (ib *Inbox) makeKey(consumer, messageID string) (key, error) {
	if err := checkConsumer(consumer); err != nil {
		return key{}, err
	}
	if messageID == "" {
		return key{}, fmt.Errorf("%w: message ID is empty", ErrInvalidID)
	}
	k := key{consumer: consumer, stored: StoredMessageID(messageID)}
	if ib.bloom != nil || ib.fast != nil {
		// NUL cannot occur in any of the three parts, so the encoding is
		// unambiguous.
		h := sha256.New()
		h.Write([]byte(ib.cfg.Table))
		h.Write([]byte{0})
		h.Write([]byte(consumer))
		h.Write([]byte{0})
		h.Write([]byte(k.stored))
		h.Sum(k.digest[:0])
	}
	return k, nil
}

// fastKey is the fast path's key: a SHA-256 over the database's namespace and
// the digest, in URL-safe base64 (43 bytes), so no broker- or client-chosen
// string ever becomes a cache key and two databases never share an entry.
func (k key) fastKey(namespace string) string {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write(k.digest[:])
	var sum [32]byte
	return base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0]))
}
