package redisstore_test

import (
	"testing"

	"github.com/idemkit/idem/idemtest"
)

func TestList(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, nil)
	idemtest.RunList(t, s)
}

func TestDigestsWithPrefix(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, nil)
	idemtest.RunDigestsWithPrefix(t, s)
}
