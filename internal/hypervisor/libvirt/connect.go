package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// defaultDialTimeout bounds reaching a daemon when Options.DialTimeout is
// zero: the same 20s go-libvirt's own ssh and TLS dialers use.
const defaultDialTimeout = 20 * time.Second

// target is a libvirt URI taken apart: how to reach the daemon, and the
// driver URI to open once there. The rules are libvirt's
// (https://libvirt.org/uri.html#remote-uris): "driver+transport", no
// transport means unix without a host and tls with one.
type target struct {
	transport  string // unix, ssh or tls
	host, port string
	user       string
	// socket is the daemon's unix socket: local for unix, on the host for
	// ssh; empty means libvirt's default.
	socket  string
	keyFile string // ssh: libvirt's keyfile= parameter
	pkiPath string // tls: libvirt's pkipath= parameter
	// driver is what the daemon opens: qemu:///system, test:///default.
	driver  string
	session bool
}

// uriParams are the URI parameters labctl honours; libvirt has more, and
// a URI with one labctl would silently ignore is refused instead.
var uriParams = map[string]bool{"socket": true, "keyfile": true, "pkipath": true, "no_tty": true}

func parseURI(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("uri %q: %w", raw, err)
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	if transport == "" {
		transport = "unix"
		if u.Host != "" {
			transport = "tls"
		}
	}
	t := target{
		transport: transport, host: u.Hostname(), port: u.Port(), user: u.User.Username(),
		socket: u.Query().Get("socket"), keyFile: u.Query().Get("keyfile"), pkiPath: u.Query().Get("pkipath"),
		driver:  (&url.URL{Scheme: driver, Path: u.Path}).String(),
		session: u.Path == "/session",
	}
	if u.Path == "" {
		t.driver = driver + ":///"
	}
	switch transport {
	case "unix":
		if u.Host != "" {
			return target{}, fmt.Errorf("uri %q: a unix socket URI names no host; for a remote host write %s+ssh://user@%s%s", raw, driver, u.Host, u.Path)
		}
	case "ssh", "tls":
		if t.host == "" {
			return target{}, fmt.Errorf("uri %q names no host; write %s://user@host/system", raw, u.Scheme)
		}
	default:
		return target{}, fmt.Errorf("uri %q: labctl speaks to libvirt over unix, ssh or tls, not %q", raw, transport)
	}
	for k := range u.Query() {
		if !uriParams[k] {
			return target{}, fmt.Errorf("uri %q: labctl does not support libvirt's %s= parameter (it knows socket=, keyfile= and pkipath=)", raw, k)
		}
	}
	return t, nil
}

// localSocket is the daemon socket for a local URI, as libvirt's remote
// driver picks it (src/remote/remote_sockets.c, remoteGetUNIXSocket, libvirt
// 9.0, "auto" mode): the driver's own modular daemon (virtqemud) when its
// socket exists, else libvirtd's; under $XDG_RUNTIME_DIR/libvirt for
// session URIs.
func localSocket(t target) string {
	if t.socket != "" {
		return t.socket
	}
	dir := "/var/run/libvirt"
	if t.session {
		runtime := os.Getenv("XDG_RUNTIME_DIR")
		if runtime == "" {
			if home, err := os.UserHomeDir(); err == nil {
				runtime = filepath.Join(home, ".cache")
			}
		}
		dir = filepath.Join(runtime, "libvirt")
	}
	drv, _, _ := strings.Cut(t.driver, ":")
	if modular := filepath.Join(dir, "virt"+drv+"d-sock"); fileExists(modular) {
		return modular
	}
	return filepath.Join(dir, "libvirt-sock")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (o Options) dialTimeout() time.Duration {
	if o.DialTimeout > 0 {
		return o.DialTimeout
	}
	return defaultDialTimeout
}

// connect dials the daemon and opens the driver, all within the dial
// timeout; ctx ends it at once (the connection is closed under it).
func connect(ctx context.Context, t target, o Options) (*lv.Libvirt, error) {
	var (
		conn net.Conn
		err  error
	)
	switch t.transport {
	case "unix":
		var d net.Dialer
		path := localSocket(t)
		conn, err = d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, explainLocal(err, path, t)
		}
	case "ssh":
		conn, err = dialSSH(ctx, t, o)
	case "tls":
		conn, err = dialTLS(ctx, t, o)
	}
	if err != nil {
		return nil, err
	}
	wire := conn
	if o.WrapConn != nil {
		wire = o.WrapConn(conn)
	}
	l := lv.NewWithDialer(dialers.NewAlreadyConnected(wire))
	// go-libvirt's calls take no context: closing the connection is what
	// interrupts them.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	err = l.ConnectToURI(lv.ConnectURI(t.driver))
	if !stop() {
		return nil, ctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		if r, ok := conn.(interface{ remoteFailure() error }); ok {
			if rerr := r.remoteFailure(); rerr != nil {
				return nil, rerr
			}
		}
		return nil, explainOpen(err, t)
	}
	return l, nil
}

// explainLocal turns a failed dial of the local socket into what to do.
func explainLocal(err error, path string, t target) error {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		fix := "start it: systemctl start libvirtd (or libvirtd -d as root)"
		if t.session {
			fix = "start your session daemon: libvirtd -d as your user (virsh -c qemu:///session starts one too)"
		}
		return fmt.Errorf("libvirtd is not running on this machine (%s: %w); %s", path, err, fix)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("permission denied on %s: run labctl as root, or add your user to the libvirt group (sudo usermod -aG libvirt $USER, then log in again): %w", path, err)
	}
	return fmt.Errorf("dialing %s: %w", path, err)
}

// explainOpen explains a daemon that was reached but refused to open the
// driver, by libvirt's error code.
func explainOpen(err error, t target) error {
	switch {
	case isCode(err, lv.ErrNoConnect):
		return fmt.Errorf("the daemon cannot open %s (is its driver installed there, e.g. libvirt-daemon-driver-qemu?): %w", t.driver, err)
	case isCode(err, lv.ErrAuthFailed), isCode(err, lv.ErrAuthCancelled), isCode(err, lv.ErrAuthUnavailable):
		return fmt.Errorf("the daemon refused access to %s: run labctl as root or as a member of the libvirt group on that host: %w", t.driver, err)
	}
	return fmt.Errorf("opening %s: %w", t.driver, err)
}
