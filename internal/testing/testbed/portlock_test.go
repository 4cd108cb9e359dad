package testbed

import (
	"net"
	"strconv"
	"testing"
)

// The ports handed out must stay clear of the kernel's ephemeral range
// (where an outgoing connection's source port could take them before the
// process binds), be bindable, and not be handed out twice while held.
func TestReservePortIsBelowTheEphemeralRangeAndExclusive(t *testing.T) {
	low, high := reserveRange()
	seen := map[int]bool{}
	var releases []func()
	for range 20 {
		p, release, err := ReservePort()
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
		if p < low || p >= high {
			t.Fatalf("port %d outside [%d, %d)", p, low, high)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice while held", p)
		}
		seen[p] = true
		if _, ok, _ := TryLockPort(p); ok {
			t.Fatalf("port %d: the lock is not held after ReservePort", p)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not bindable: %v", p, err)
		}
		l.Close()
	}
	for _, r := range releases {
		r()
	}
	for p := range seen {
		unlock, ok, err := TryLockPort(p)
		if err != nil || !ok {
			t.Fatalf("port %d still locked after release (ok=%v, err=%v)", p, ok, err)
		}
		unlock()
	}
}

// A port something already listens on, on loopback or on every
// interface, is never taken for free.
func TestBoundPortIsNotFree(t *testing.T) {
	for _, host := range []string{"127.0.0.1", ""} {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if portFree(p) {
			t.Errorf("port %d bound on %q reported free", p, host)
		}
		l.Close()
		if !portFree(p) {
			t.Errorf("port %d reported taken after its listener closed", p)
		}
	}
}
