package libvirttest

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
)

// Cutter counts the libvirt RPC calls a process sends, over every
// connection it wraps (libvirt.Options.WrapConn), and cuts the process
// off between two of them: the call after the first After is never sent;
// Cut runs instead (a test's child process kills itself there, so
// whatever the calls before made on the daemon stays, and nothing after
// happens, as when the provider's pod is killed).
//
// It reads the wire as libvirt frames it (src/rpc/virnetprotocol.x,
// libvirt 9.0): each message is a 4-byte big-endian length, counting
// itself, then the header (prog, vers, proc, type, serial, status, 4
// bytes each); type 0 is VIR_NET_CALL and 4 VIR_NET_CALL_WITH_FDS.
// Replies, stream data and keepalive messages are not calls.
type Cutter struct {
	// After is how many calls go through; zero or less: all do.
	After int
	// Before, when not zero, cuts at the first call of this procedure
	// instead, however many went before it.
	Before uint32
	// Cut is called in place of sending call After+1, with its
	// procedure number (src/remote/remote_protocol.x). It should not
	// return; if it does, that write fails.
	Cut func(proc uint32)

	mu    sync.Mutex
	procs []uint32
}

// Calls is how many calls were sent so far.
func (c *Cutter) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.procs)
}

// Procedures are the procedure numbers of the calls sent so far, in order.
func (c *Cutter) Procedures() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint32(nil), c.procs...)
}

// Wrap is a libvirt.Options.WrapConn.
func (c *Cutter) Wrap(conn net.Conn) net.Conn { return &cutConn{Conn: conn, c: c} }

// errCut is what a write returns when Cut returned.
var errCut = errors.New("libvirttest: cut off before this libvirt call")

const (
	rpcLenSize    = 4
	rpcHeaderSize = 24
	rpcCall       = 0
	rpcCallFDs    = 4
)

// cutConn parses the messages written through it, whatever the writes'
// boundaries: head collects a message's length and header, rest is what
// is left of its body.
type cutConn struct {
	net.Conn
	c    *Cutter
	mu   sync.Mutex
	head []byte
	rest int
}

func (w *cutConn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for b := p; len(b) > 0; {
		if w.rest > 0 {
			n := min(w.rest, len(b))
			w.rest -= n
			b = b[n:]
			continue
		}
		n := min(rpcLenSize+rpcHeaderSize-len(w.head), len(b))
		w.head = append(w.head, b[:n]...)
		b = b[n:]
		if len(w.head) < rpcLenSize+rpcHeaderSize {
			continue
		}
		length := int(binary.BigEndian.Uint32(w.head))
		proc := binary.BigEndian.Uint32(w.head[rpcLenSize+8:])
		typ := binary.BigEndian.Uint32(w.head[rpcLenSize+12:])
		w.head = w.head[:0]
		w.rest = max(length-rpcLenSize-rpcHeaderSize, 0)
		if (typ == rpcCall || typ == rpcCallFDs) && !w.c.pass(proc) {
			// Nothing of this write goes out: the call is never sent.
			return 0, errCut
		}
	}
	return w.Conn.Write(p)
}

// pass counts one call; false means it is the one to cut at (Cut has
// run and returned).
func (c *Cutter) pass(proc uint32) bool {
	c.mu.Lock()
	if (c.Before != 0 && proc != c.Before) || (c.Before == 0 && (c.After <= 0 || len(c.procs) < c.After)) {
		c.procs = append(c.procs, proc)
		c.mu.Unlock()
		return true
	}
	c.mu.Unlock()
	if c.Cut != nil {
		c.Cut(proc)
	}
	return false
}
