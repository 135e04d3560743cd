package redisinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/redis/redisinbox"
)

// A FastPath on a rueidis client: the Claim and Complete calls of concurrent
// deliveries share pipelined connections. Hand it to the inbox as
// inbox.Config.FastPath; here it is called directly to show its answers.
//
// It needs a Redis server (IDEM_TEST_REDIS, default
// redis://127.0.0.1:6379/0), so it has no Output line and does not run under
// go test; TestExamples runs it against the test server and checks that it
// prints:
//
//	first delivery claimed: true
//	redelivery after the commit is done: true
func ExampleNewRueidis() {
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idem:example:" + hex.EncodeToString(b[:]) + ":"

	// Timeout: a second rather than the 200ms default, as this example is
	// also run by a test on a busy machine.
	fast, err := redisinbox.NewRueidis(c, &redisinbox.Config{Prefix: prefix, DoneTTL: 7 * 24 * time.Hour, Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	state, token, err := fast.Claim(ctx, "msg-1")
	if err != nil {
		panic(err)
	}
	fmt.Println("first delivery claimed:", state == inbox.FastClaimed)
	// … the handler's transaction commits, then:
	if err := fast.Complete(ctx, "msg-1", token); err != nil {
		panic(err)
	}
	state, _, err = fast.Claim(ctx, "msg-1")
	if err != nil {
		panic(err)
	}
	fmt.Println("redelivery after the commit is done:", state == inbox.FastDone)

	c.Do(ctx, c.B().Del().Key(prefix+"msg-1").Build())
}
