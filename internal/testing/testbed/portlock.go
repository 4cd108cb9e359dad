package testbed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// TryLockPort takes the machine-wide lock on a port an upstream binary
// hard-codes and binds on every interface (CAPMOX v0.9.0's webhook port
// 9443: it has no flag for it), so that two test processes that run it,
// in different packages of one `go test ./...`, take turns instead of
// one failing to bind. ok is false while another holds it. unlock frees
// it; the lock also goes when the process ends.
func TryLockPort(port int) (unlock func(), ok bool, err error) {
	path := filepath.Join(os.TempDir(), "labctl-box-port-"+strconv.Itoa(port)+".lock")
	for {
		f, err := openLockFile(path)
		if err != nil {
			return nil, false, fmt.Errorf("locking port %d: %w", port, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("locking port %d (%s): %w", port, path, err)
		}
		// The holder removes the file when it lets go (so /tmp does not
		// fill with lock files); a lock won on a file that was removed
		// meanwhile guards nothing, so try again on the new one.
		if sameFile(f, path) {
			return func() {
				_ = os.Remove(path) // another user's file stays; harmless
				f.Close()
			}, true, nil
		}
		f.Close()
	}
}

// openLockFile opens the lock file read-only, which is enough for flock,
// so a file another user made (0644 under the usual umask) serves every
// user. It opens without O_CREAT first: with fs.protected_regular set,
// O_CREAT on another user's file in the sticky /tmp is refused, even to
// root.
func openLockFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	}
	return f, err
}

func sameFile(f *os.File, path string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(path)
	return err == nil && os.SameFile(held, now)
}

// ReservePort returns a free loopback port for a process the test starts
// later, held under TryLockPort's lock until release. The port is below
// the kernel's ephemeral range (net.ipv4.ip_local_port_range): a port
// that the kernel handed out for ":0" could be given again as the source
// port of some outgoing connection (the API server's to etcd, say)
// before the process binds it, and the bind then fails. Below that range
// only other listeners compete, and every test bed listener takes its
// port here, under the lock.
func ReservePort() (port int, release func(), err error) {
	low, high := reserveRange()
	n := high - low
	start := rand.IntN(n)
	for i := range n {
		p := low + (start+i)%n
		unlock, ok, err := TryLockPort(p)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			continue
		}
		// Both the loopback address and the wildcard: some binaries bind
		// every interface.
		if portFree(p) {
			return p, unlock, nil
		}
		unlock()
	}
	return 0, nil, fmt.Errorf("no free loopback port in %d-%d", low, high-1)
}

// reserveRange is [low, high): the 8192 ports just below the ephemeral
// range, or below 32768 (Linux's default start) when it cannot be read.
func reserveRange() (int, int) {
	high := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 9000 {
				high = v
			}
		}
	}
	low := max(high-8192, 1025)
	return low, high
}

func portFree(p int) bool {
	for _, host := range []string{"127.0.0.1", ""} {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}
