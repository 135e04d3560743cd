package natsinbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox/internal/adaptertest"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/testenv"
)

// §1: an outage is not poison. The database is refused for a minute while
// messages keep arriving (some of them repeats), with the default retry
// settings (which used to terminate a valid message after a 15 s outage)
// and an AckWait far shorter than the outage. Afterwards every message
// has exactly one effect, none was dead-lettered or terminated, the
// stream is fully acked, and the subscriber did retry during the outage.
func TestDatabaseOutageIsNotPoison(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	odb := adaptertest.NewOutageInbox(t)
	s := newSub(t, odb.Inbox, env.cons, effect, natsinbox.Config{
		Concurrency: 4, DeadLetterSubject: dlq, JetStream: env.js,
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	before := adaptertest.IDs("before", 20)
	for _, id := range before {
		env.publish(t, id, "x")
	}
	odb.WaitEffects(t, len(before), 30*time.Second)

	during := odb.Outage(t, testenv.Refuse, time.Second, func(i int) {
		id := "during-" + strconv.Itoa(i)
		env.publish(t, id, "x")
		if i%3 == 0 {
			env.publish(t, id, "x") // a producer retry: same ID
		}
		if i%10 == 0 {
			env.publish(t, before[i%len(before)], "x") // a late redelivery of an old one
		}
	})
	retried := s.Stats().Retried
	odb.WaitEffects(t, len(before)+during, 60*time.Second)
	adaptertest.WaitFor(t, "the stream fully acked", 30*time.Second, func() bool { return env.settled(t) })

	st := s.Stats()
	if st.DeadLettered != 0 || len(env.deadLettered(t, dlq)) != 0 {
		t.Fatalf("after the outage: stats %+v, %d dead letters; want none", st, len(env.deadLettered(t, dlq)))
	}
	if retried == 0 {
		t.Fatal("no attempt failed during the outage: the fault did not reach the consumer")
	}
	if want := uint64(len(before) + during); st.Processed != want {
		t.Fatalf("processed %d, want %d (one per unique ID)", st.Processed, want)
	}
	t.Logf("outage %v: %d messages during it, %d retried attempts, %d duplicates acked", adaptertest.OutageDuration, during, retried, st.Duplicates)
}
