package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	// Read-only is enough for flock, so a lock file another user made
	// (mode 0644 under the usual umask) serves every user.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
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
	return func() { f.Close() }, true, nil
}
