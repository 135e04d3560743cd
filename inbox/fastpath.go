package inbox

import "context"

// FastState is what a FastPath knows about a message before the database is asked.
type FastState uint8

const (
	// FastClaimed: the fast path had no entry; it now holds a short-lived
	// "processing" entry owned by the returned token.
	FastClaimed FastState = iota + 1
	// FastBusy: another delivery holds a "processing" entry. The inbox goes on
	// to the database, whose row lock makes this delivery wait for the other
	// one's transaction and then answers correctly either way.
	FastBusy
	// FastDone: the message was processed and committed before. The inbox
	// answers Duplicate without touching the database.
	FastDone
)

// FastPath is an optional cache in front of the dedup table (the design's
// "Redis SETNX fast path"). It only ever saves work: the database stays the
// judge. Every error, every lost or flushed entry, makes the inbox fall back
// to the database; it is never fatal and never drops a message.
//
// Implementations must be safe for concurrent use. Package redisinbox
// implements it on Redis. key is an opaque, fixed-length hash (43 bytes,
// URL-safe base64) of the table, consumer and message ID.
type FastPath interface {
	// Claim marks key as being processed, atomically: only when it has no
	// entry. It reports the state it found; token is set for FastClaimed.
	Claim(ctx context.Context, key string) (state FastState, token string, err error)
	// Complete records that key was committed. It must not overwrite another
	// token's live claim; with token "" (no claim was taken) it only fills an
	// empty entry.
	Complete(ctx context.Context, key, token string) error
	// Release drops the claim held by token (compare-and-delete); a claim
	// held by another token, or a "done" entry, is left alone.
	Release(ctx context.Context, key, token string) error
}
