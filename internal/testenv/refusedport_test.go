//go:build linux

package testenv_test

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

func TestRefusedPortRefusesAndStaysTaken(t *testing.T) {
	port := testenv.RefusedPort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("connect succeeded")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connect: %v, want refused", err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatal("another listener could bind the port")
	}
}
