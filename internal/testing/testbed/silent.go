package testbed

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Silent is a loopback listener that accepts TCP and then says nothing,
// not even its half of a TLS handshake: a hung API server. Conns counts
// the connections it accepted.
type Silent struct {
	Addr  string
	conns atomic.Int32
}

// Conns is the number of connections accepted so far.
func (s *Silent) Conns() int { return int(s.conns.Load()) }

// StartSilent listens on 127.0.0.1 until the test ends.
func StartSilent(t testing.TB) *Silent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silent{Addr: ln.Addr().String()}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	return s
}

// ClosedAddr is a loopback address nothing listens on: a port that was
// just free, for a server that refuses the connection.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
