// Package libvirttest starts a real libvirtd for tests: the real daemon
// and its real RPC, in a temp folder, stopped when the test binary ends.
// It runs in a private mount namespace with a tmpfs over /run, so nothing
// of it lands on the machine, and it loads no driver modules
// (LIBVIRT_DRIVER_DIR is an empty folder), so it cannot touch the
// machine's VMs, pools or networks or get in the way of the machine's own
// libvirtd. What it serves is the test driver built into libvirt
// (test:///default), over its unix socket and, with the test's own CA,
// over TLS on 127.0.0.1. The libvirt driver's tests and doctor's use one.
//
// StartStorage starts one that also loads libvirt's real storage driver
// and its directory backend (and nothing else), reached as
// storage:///system: real pools on disk and real volume streams
// (virStorageVolUpload/Download), which the test driver lacks. Its
// /etc/libvirt is a tmpfs too, so it never sees the machine's pools.
package libvirttest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
)

// Daemon is one running test libvirtd.
type Daemon struct {
	Dir     string
	Sock    string // the read-write unix socket, mode 0700
	TLSPort string
	// Client side of the test PKI, for qemu+tls:// URIs.
	CAFile, CertFile, KeyFile string
	// SmallPool is a folder on a tmpfs of the size StorageOptions asked,
	// inside the daemon's mount namespace only: a pool there runs out of
	// room.
	SmallPool   string
	storage     bool
	cmd         *exec.Cmd
	log         string
	releasePort func()
	stopOnce    sync.Once
}

var (
	sharedOnce sync.Once
	shared     *Daemon
	sharedErr  error
)

// Shared starts the test binary's daemon on first use and returns it; an
// error says why it cannot run here (the caller skips or fails). Call
// StopShared from TestMain after m.Run.
func Shared() (*Daemon, error) {
	sharedOnce.Do(func() { shared, sharedErr = start(StorageOptions{}) })
	return shared, sharedErr
}

// StopShared stops the daemon Shared started, if any.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// Start is Shared for a test: it skips the test when no daemon can run
// here, or fails it under CI or LABCTL_REQUIRE_LIBVIRT.
func Start(t testing.TB) *Daemon {
	t.Helper()
	d, err := Shared()
	if err != nil {
		skipOrFail(t, err)
	}
	return d
}

// StartPrivate starts one more daemon, the test's alone, with its own
// state, PKI and TLS port: a second host beside the shared one. It stops
// when the test ends, or earlier by Stop (a host that goes away).
func StartPrivate(t testing.TB) *Daemon {
	t.Helper()
	d, err := start(StorageOptions{})
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(d.Stop)
	return d
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	skipOrFailWhy(t, "cannot start the test's own libvirtd: "+err.Error())
}

// skipOrFailWhy skips the test, or fails it where a skip would prove
// nothing: under CI or LABCTL_REQUIRE_LIBVIRT.
func skipOrFailWhy(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" || os.Getenv("LABCTL_REQUIRE_LIBVIRT") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// Stop stops a daemon StartPrivate started; its socket and TLS port stop
// answering. Stopping twice is fine.
func (d *Daemon) Stop() { d.stopOnce.Do(d.stop) }

// NewPKI makes a CA with a server and a client certificate in dir, as the
// daemon's own, for tests that need one the daemon does not know.
func NewPKI(dir string) (*Daemon, error) {
	d := &Daemon{Dir: dir}
	return d, d.makePKI()
}

// StorageOptions shape a StartStorage daemon.
type StorageOptions struct {
	// SmallPoolMiB, when set, mounts a tmpfs of that size at SmallPool.
	SmallPoolMiB int
	storage      bool
}

// StartStorage starts a private daemon with libvirt's storage driver
// (directory pools): a host whose pools and volume streams are real. It
// stops when the test ends, or earlier by Stop.
func StartStorage(t testing.TB, o StorageOptions) *Daemon {
	t.Helper()
	o.storage = true
	d, err := start(o)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(d.Stop)
	return d
}

// URI is the daemon's test driver over its unix socket, or for a
// StartStorage daemon its storage driver.
func (d *Daemon) URI() string {
	if d.storage {
		return "storage:///system?socket=" + d.Sock
	}
	return "test:///default?socket=" + d.Sock
}

func start(o StorageOptions) (*Daemon, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("it needs root (a private mount namespace)")
	}
	for _, tool := range []string{"libvirtd", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is missing: apt-get install libvirt-daemon-system util-linux", tool)
		}
	}
	dir, err := os.MkdirTemp("", "labctl-libvirtd-")
	if err != nil {
		return nil, err
	}
	// 0755: the permission test reaches the socket as another user, and
	// the socket's own mode (0700) is what refuses it.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	d := &Daemon{Dir: dir, Sock: filepath.Join(dir, "sock", "libvirt-sock"), log: filepath.Join(dir, "libvirtd.log"), storage: o.storage}
	for _, sub := range []string{"drivers", "sock"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	if err := d.makePKI(); err != nil {
		return nil, fmt.Errorf("making the test PKI: %w", err)
	}
	port, release, err := testbed.ReservePort()
	if err != nil {
		return nil, err
	}
	d.TLSPort, d.releasePort = strconv.Itoa(port), release
	conf := fmt.Sprintf(`unix_sock_dir = %q
unix_sock_rw_perms = "0700"
unix_sock_ro_perms = "0700"
auth_unix_rw = "none"
auth_unix_ro = "none"
listen_tls = 1
listen_tcp = 0
listen_addr = "127.0.0.1"
tls_port = %q
auth_tls = "none"
ca_file = %q
cert_file = %q
key_file = %q
log_outputs = "3:file:%s"
`, filepath.Join(dir, "sock"), d.TLSPort, filepath.Join(dir, "pki", "cacert.pem"),
		filepath.Join(dir, "pki", "servercert.pem"), filepath.Join(dir, "pki", "serverkey.pem"), d.log)
	confPath := filepath.Join(dir, "libvirtd.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	script := "mount -t tmpfs tmpfs /run && "
	if o.storage {
		mod := "libvirt_driver_storage.so"
		src, err := driverModule(mod)
		if err != nil {
			return nil, err
		}
		if err := os.Symlink(src, filepath.Join(dir, "drivers", mod)); err != nil {
			return nil, err
		}
		// The machine's pool definitions stay out of sight.
		script += "mount -t tmpfs tmpfs /etc/libvirt && "
		if o.SmallPoolMiB > 0 {
			d.SmallPool = filepath.Join(dir, "small")
			if err := os.MkdirAll(d.SmallPool, 0o755); err != nil {
				return nil, err
			}
			script += fmt.Sprintf("mount -t tmpfs -o size=%dm tmpfs %s && ", o.SmallPoolMiB, d.SmallPool)
		}
	}
	script += "exec libvirtd --listen -f " + confPath + " -p " + filepath.Join(dir, "libvirtd.pid")
	d.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	d.cmd.Env = append(os.Environ(), "LIBVIRT_DRIVER_DIR="+filepath.Join(dir, "drivers"))
	var out bytes.Buffer
	d.cmd.Stdout, d.cmd.Stderr = &out, &out
	// Pdeathsig: a test binary that dies (a timeout's panic skips
	// TestMain's stop) takes its daemon with it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(exited) }()
	deadline := time.After(60 * time.Second)
	for {
		if c, err := net.Dial("unix", d.Sock); err == nil {
			_ = c.Close()
			if c, err := net.Dial("tcp", "127.0.0.1:"+d.TLSPort); err == nil {
				_ = c.Close()
				return d, nil
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(d.log)
			if os.Getenv("LABCTL_TEST_KEEP") == "" {
				_ = os.RemoveAll(dir)
			}
			return nil, fmt.Errorf("libvirtd exited: %s\n%s", out.String(), log)
		case <-deadline:
			d.stop()
			return nil, fmt.Errorf("libvirtd did not listen within 60s: %s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// driverModule finds a libvirt connection driver module of the
// machine's libvirt (Debian's multiarch folder, or /usr/lib64).
func driverModule(name string) (string, error) {
	matches, _ := filepath.Glob("/usr/lib*/*/libvirt/connection-driver/" + name)
	more, _ := filepath.Glob("/usr/lib*/libvirt/connection-driver/" + name)
	if m := append(matches, more...); len(m) > 0 {
		return m[0], nil
	}
	return "", fmt.Errorf("libvirt's storage driver (%s) is missing: apt-get install libvirt-daemon-driver-storage (or libvirt-daemon-system)", name)
}

func (d *Daemon) stop() {
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = d.cmd.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
		}
	}
	_ = os.RemoveAll(d.Dir)
	if d.releasePort != nil {
		d.releasePort()
	}
}

// makePKI writes a CA, the daemon's certificate for 127.0.0.1 and a
// client certificate, with the key usages libvirt checks
// (src/rpc/virnettlscontext.c, virNetTLSContextCheckCert).
func (d *Daemon) makePKI() error {
	dir := filepath.Join(d.Dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("labctl test CA")
	if err != nil {
		return err
	}
	server, err := ca.Serving(nil, []net.IP{pki.Loopback})
	if err != nil {
		return err
	}
	client, err := ca.Client("labctl test client")
	if err != nil {
		return err
	}
	d.CAFile, d.CertFile, d.KeyFile = filepath.Join(dir, "cacert.pem"), filepath.Join(dir, "clientcert.pem"), filepath.Join(dir, "clientkey.pem")
	for path, data := range map[string][]byte{
		d.CAFile: ca.PEM, d.CertFile: client.Cert, d.KeyFile: client.Key,
		filepath.Join(dir, "servercert.pem"): server.Cert, filepath.Join(dir, "serverkey.pem"): server.Key,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
