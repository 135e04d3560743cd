package redisclient

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Wait is the WAIT that Client.EvalWait sends behind a script: block until
// Replicas replicas have acknowledged the connection's writes, or Timeout
// has passed.
type Wait struct {
	Replicas int
	Timeout  time.Duration
}

// args are WAIT's arguments: numreplicas, timeout in milliseconds (at
// least 1: WAIT's 0 means "forever").
func (w Wait) args() (string, string) {
	ms := w.Timeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.Itoa(w.Replicas), strconv.FormatInt(ms, 10)
}

// ErrWaitUnsupported is returned by EvalWait for a client whose connection
// to the key's master the adapter cannot pick (a go-redis Ring, or a type
// it does not know): it cannot put the script and the WAIT on one
// connection, so it sends neither.
var ErrWaitUnsupported = errors.New("redisclient: this client cannot send a script and WAIT on one connection (use a single-node, sentinel or cluster client)")

// maxMoved bounds how many times EvalWait asks the cluster again after a
// MOVED reply (the slot map it used was stale).
const maxMoved = 3

// isMoved reports whether r is a MOVED error reply.
func isMoved(r Reply) bool {
	var se *ServerError
	return errors.As(r.err, &se) && strings.HasPrefix(se.Msg, "MOVED ")
}
