package outbox_test

import "os"

// tempDir is a fresh directory for an example's database (examples have
// no testing.T to clean up after them; the OS temp dir does).
func tempDir() string {
	d, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	return d
}
