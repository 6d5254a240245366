package testenv

import (
	"net"
	"testing"
)

// FreePort is a TCP port on the loopback that nothing listens on now (for a
// test's Prometheus endpoint or collector).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
