// Package onetime issues server-side one-time tokens and consumes them
// atomically: the classic answer to form resubmission ("the server
// pre-issues a token"; 先取 token 再提交，服务端原子消费 token).
//
// A user opens a payment form; the page carries a token the server just
// issued, bound to the user's session. The user clicks "Pay" twice, or the
// browser resends the POST after a timeout. Both submits present the same
// token; the store lets exactly one of them spend it, and the other is
// refused — or, behind the formtoken middleware, answered with the first
// submit's response.
//
//	tokens, _ := onetime.New(store, nil)           // store: sqltoken or redistoken
//	tok, _ := tokens.Issue(ctx, "session:"+sid)      // render it into the form
//	err := tokens.Consume(ctx, "session:"+sid, tok)  // on submit: nil exactly once
//
// # Sections
//
//   - Tokens: Issue, Consume, and Take/Restore for work that may fail.
//   - Store: the small contract a backend implements (tokentest checks it).
//   - Use: who spends a token; how an idempotency record's later owner
//     re-takes it.
//   - Errors: ErrUnknown, ErrWrongScope, ErrUsed, ErrExpired (all
//     IsRejected), ErrNotHeld; store failures match idem.ErrUnavailable.
//
// Backends: sqltoken (PostgreSQL, MySQL/MariaDB, SQLite) and redistoken.
// HTTP: formtoken, middleware on top of httpidem. This package imports
// neither a driver, a Redis client nor net/http.
//
// # Tokens
//
// A token is 32 bytes from crypto/rand in unpadded base64url (43
// characters). Stores keep SHA-256 digests of the token and of its scope,
// never the raw values: a leaked table cannot be replayed and reveals no
// session or user id. A presented string that Issue could not have made is
// ErrUnknown without a store round trip.
//
// Consume is one atomic step in the store (a conditional UPDATE with rows
// affected, a Lua script); its outcomes are checked in this order:
//
//	not issued, or purged                 ErrUnknown
//	issued to another scope               ErrWrongScope (the token is untouched)
//	spent already                         ErrUsed
//	past its TTL                          ErrExpired
//	otherwise                             nil: this call spent it
//
// Tokens are marked spent, not deleted, so a late repeat is told ErrUsed
// rather than ErrUnknown, until retention removes them (Purge for SQL, TTL
// for Redis). A foreign scope never spends a token and never learns whether
// it was used or expired.
//
// # Work that fails after the token was spent
//
// Consume cannot be undone. When the work after it may fail, use Take, which
// returns a Receipt, and Restore it on failure: the token becomes unused
// again (with its original expiry) and the user can submit once more.
// Restore only works for the Use that holds the token (ErrNotHeld
// otherwise). formtoken does this for every 5xx answer and panic.
//
// A Use is an ID and a fence. Consume uses a random ID. formtoken uses
// UseFor(owner) of the idempotency record that the token keys: the ID
// derives from the record's key, the fence is the owner's fencing token.
// When the holder of that record dies after spending the token, the record's
// next owner (same ID, higher fence) re-takes the token instead of being
// refused, and the dead holder, should it wake up, can no longer restore
// it. A re-take is refused once the token has expired; formtoken requires
// the record to outlive the token, so a repeat can never find the token
// re-takable after its record is gone.
//
// # Guarantees
//
//   - Of any number of concurrent consumers of one token, exactly one wins
//     (store-side atomic decision; tested with 100 goroutines on every
//     backend).
//   - Crash after Consume: the token stays spent. Behind formtoken, the
//     resubmit takes the record over after its lease and re-takes the token
//     (tested by SIGKILLing a process mid-request).
//   - Store outage: every call fails with an error matching
//     idem.ErrUnavailable; a token is never assumed valid or spent.
//   - Clock: expiry is decided by the store's clock (database clock, Redis
//     TIME); application clocks do not matter. A jump of the store's clock
//     moves every token's remaining life by the jump.
//   - Not promised: that the work behind a spent token happened. A process
//     that dies after Consume and before its effect leaves a spent token and
//     no effect; plain Consume callers must handle that (Take/Restore, or
//     formtoken's record).
package onetime
