package onetime

import "errors"

// Rejections: the token does not let the caller proceed. Consume checks them
// in this order, so a caller outside the token's scope never learns whether
// it was used or expired. Match them with errors.Is; all of them also match
// ErrRejected.
var (
	// ErrRejected matches every rejection below (IsRejected).
	ErrRejected = errors.New("onetime: token rejected")
	// ErrUnknown: no such token was issued, it is malformed, or it was
	// purged after its retention.
	ErrUnknown = &rejection{msg: "onetime: unknown token"}
	// ErrWrongScope: the token was issued to another scope (user, session
	// or form). It is left untouched: a foreign caller cannot spend it.
	ErrWrongScope = &rejection{msg: "onetime: token belongs to another scope"}
	// ErrUsed: the token was consumed already.
	ErrUsed = &rejection{msg: "onetime: token already used"}
	// ErrExpired: the token's time to live ran out before it was consumed.
	ErrExpired = &rejection{msg: "onetime: token expired"}
)

// ErrNotHeld is returned by Restore when the receipt no longer holds the
// token: it was restored already, taken over by a later owner of the same
// idempotency record, or purged. Nothing was changed.
var ErrNotHeld = errors.New("onetime: receipt does not hold the token")

type rejection struct{ msg string }

func (r *rejection) Error() string { return r.msg }

// Is makes every rejection match ErrRejected.
func (r *rejection) Is(target error) bool { return target == ErrRejected }

// IsRejected reports whether err is one of the token rejections (ErrUnknown,
// ErrWrongScope, ErrUsed, ErrExpired), as opposed to a store failure.
func IsRejected(err error) bool { return errors.Is(err, ErrRejected) }
