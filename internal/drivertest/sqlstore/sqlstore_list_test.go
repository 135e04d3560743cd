package sqlstore_test

import (
	"testing"

	"github.com/idemkit/idem/idemtest"
)

func TestList(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			s := newStore(t, b, db)
			idemtest.RunList(t, s)
		})
	}
}

func TestDigestsWithPrefix(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			s := newStore(t, b, db)
			idemtest.RunDigestsWithPrefix(t, s)
		})
	}
}
