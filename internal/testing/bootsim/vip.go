package bootsim

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed/runner"
)

// vip stands in for kube-vip, which holds the control-plane endpoint's
// address on one control-plane machine at a time (the leader of its
// election) and moves it to another when the holder stops serving: its
// lease lapses once its API server fails. Here the address is a listener
// that forwards each connection to the holder's API server. When the
// holder changes, the connections to the old one are cut, as moving the
// address cuts them, and clients reconnect to the new holder.
type vip struct {
	ln      net.Listener
	members func() []*controlPlane
	mu      sync.Mutex
	holder  *controlPlane
	conns   map[*trackedConn]*controlPlane
}

// vipCheckEvery is how often the holder's readiness is looked at; two
// misses in a row move the address, as a lapsed lease would.
const vipCheckEvery = 500 * time.Millisecond

// startVIP listens on endpoint (host:port) and hands it to the first
// ready machine members lists, looking again until ctx ends.
func startVIP(ctx context.Context, endpoint string, members func() []*controlPlane) (*vip, error) {
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return nil, fmt.Errorf("holding the control-plane endpoint %s as kube-vip would: %w", endpoint, err)
	}
	v := &vip{ln: ln, members: members, conns: map[*trackedConn]*controlPlane{}}
	v.elect(ctx, nil)
	go runner.Pipe(ln, v.dial)
	go v.watch(ctx)
	return v, nil
}

func (v *vip) dial() (net.Conn, error) {
	v.mu.Lock()
	h := v.holder
	v.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("no control-plane machine holds the address")
	}
	c, err := net.DialTimeout("tcp", h.apiAddr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.holder != h {
		_ = c.Close()
		return nil, fmt.Errorf("the address moved while connecting")
	}
	tc := &trackedConn{Conn: c, v: v}
	v.conns[tc] = h
	return tc, nil
}

// watch moves the address when its holder misses two looks in a row.
func (v *vip) watch(ctx context.Context) {
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(vipCheckEvery):
		}
		v.mu.Lock()
		h := v.holder
		v.mu.Unlock()
		if h != nil && holds(v.members(), h) {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ok := h.ready(lctx)
			cancel()
			if ok {
				misses = 0
				continue
			}
			if misses++; misses < 2 {
				continue
			}
		}
		misses = 0
		v.elect(ctx, h)
	}
}

func holds(ms []*controlPlane, h *controlPlane) bool {
	for _, m := range ms {
		if m == h {
			return true
		}
	}
	return false
}

// elect gives the address to the first ready machine other than old, in
// join order, and cuts old's connections.
func (v *vip) elect(ctx context.Context, old *controlPlane) {
	var next *controlPlane
	for _, m := range v.members() {
		if m == old {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok := m.ready(lctx)
		cancel()
		if ok {
			next = m
			break
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if next == nil && old != nil && holds(v.members(), old) {
		return // nobody better: keep it
	}
	v.holder = next
	for c, h := range v.conns {
		if h != next {
			_ = c.Conn.Close()
			delete(v.conns, c)
		}
	}
}

func (v *vip) close() {
	_ = v.ln.Close()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.holder = nil
	for c := range v.conns {
		_ = c.Conn.Close()
	}
	v.conns = map[*trackedConn]*controlPlane{}
}

// trackedConn leaves the vip's books when closed.
type trackedConn struct {
	net.Conn
	v *vip
}

func (c *trackedConn) Close() error {
	c.v.mu.Lock()
	delete(c.v.conns, c)
	c.v.mu.Unlock()
	return c.Conn.Close()
}
