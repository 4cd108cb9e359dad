package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/libvirttest"
)

func TestParseURI(t *testing.T) {
	for raw, want := range map[string]target{
		"qemu:///system":                       {transport: "unix", driver: "qemu:///system"},
		"qemu:///session":                      {transport: "unix", driver: "qemu:///session", session: true},
		"qemu+unix:///system?socket=/s/sock":   {transport: "unix", driver: "qemu:///system", socket: "/s/sock"},
		"test:///default":                      {transport: "unix", driver: "test:///default"},
		"qemu+ssh://me@kvm1/system":            {transport: "ssh", host: "kvm1", user: "me", driver: "qemu:///system"},
		"qemu+ssh://kvm1:2222/system?no_tty=1": {transport: "ssh", host: "kvm1", port: "2222", driver: "qemu:///system"},
		"qemu+ssh://me@kvm1/system?keyfile=/k": {transport: "ssh", host: "kvm1", user: "me", driver: "qemu:///system", keyFile: "/k"},
		"qemu+tls://kvm1.lab/system":           {transport: "tls", host: "kvm1.lab", driver: "qemu:///system"},
		"qemu://kvm1.lab/system?pkipath=/p":    {transport: "tls", host: "kvm1.lab", driver: "qemu:///system", pkiPath: "/p"},
	} {
		got, err := parseURI(raw)
		if err != nil || got != want {
			t.Errorf("parseURI(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for raw, msg := range map[string]string{
		"qemu+ssh:///system":                   "names no host",
		"qemu+tcp://kvm1/system":               `not "tcp"`,
		"qemu+ssh://kvm1/system?no_verify=1":   "no_verify=",
		"qemu+unix://kvm1/system":              "qemu+ssh://user@kvm1/system",
		"qemu+libssh2://kvm1/system?sshauth=x": `not "libssh2"`,
	} {
		if _, err := parseURI(raw); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseURI(%q) = %v; want an error saying %q", raw, err, msg)
		}
	}
}

// TestHelperCommand compares the remote command with the one libvirt 9.0
// builds (virNetClientSSHHelperCommand, src/rpc/virnetclient.c) for the
// same URIs.
func TestHelperCommand(t *testing.T) {
	nc := `if 'nc' -q 2>&1 | grep "requires an argument" >/dev/null 2>&1; then ARG=-q0;else ARG=;fi;'nc' $ARG -U `
	for raw, want := range map[string]string{
		"qemu+ssh://h/system": `sh -c 'which virt-ssh-helper 1>/dev/null 2>&1; if test $? = 0; then     virt-ssh-helper 'qemu:///system'; else    ` +
			nc + `/var/run/libvirt/libvirt-sock; fi'`,
		"qemu+ssh://h/session":                    `sh -c 'virt-ssh-helper 'qemu:///session''`,
		"test+ssh://h/default?socket=/tmp/x/sock": `sh -c '` + nc + `/tmp/x/sock'`,
	} {
		tg, err := parseURI(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := helperCommand(tg); got != want {
			t.Errorf("helperCommand(%s):\n got %s\nwant %s", raw, got, want)
		}
	}
}

func TestNoLibvirtd(t *testing.T) {
	o := Options{Name: "local", URI: "qemu:///system?socket=" + filepath.Join(t.TempDir(), "libvirt-sock"), Pool: "default", Network: "labctl"}
	_, err := New(t.Context(), o)
	if err == nil {
		t.Fatal("New succeeded without a daemon")
	}
	t.Logf("no daemon: %v", err)
	for _, want := range []string{"libvirt hypervisor local: connecting to " + o.URI, "libvirtd is not running on this machine", "systemctl start libvirtd"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// helperEnv makes the test binary connect to the URI it holds, print the
// error and exit: TestPermissionDenied runs it as another user.
const helperEnv = "LABCTL_TEST_CONNECT_HELPER_URI"

func runHelper() {
	d, err := New(context.Background(), Options{Name: "local", URI: os.Getenv(helperEnv), Pool: "default", Network: "labctl"})
	if err == nil {
		_ = d.Close()
	}
	fmt.Print(err)
	os.Exit(0)
}

// TestPermissionDenied connects as user nobody to the daemon's socket,
// which only root may use (mode 0700).
func TestPermissionDenied(t *testing.T) {
	dmn := testLibvirtd(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary sits in a folder only root can read; nobody runs a copy.
	bin := filepath.Join(dmn.Dir, "helper-"+t.Name())
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(bin)
	cmd := exec.CommandContext(t.Context(), bin)
	cmd.Env = []string{helperEnv + "=" + dmn.URI(), "HOME=/nonexistent", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	t.Logf("as nobody: %s", out)
	for _, want := range []string{"permission denied on " + dmn.Sock, "run labctl as root, or add your user to the libvirt group"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("as nobody: %q lacks %q", out, want)
		}
	}
	// Root, the socket's owner, gets in.
	d, err := New(t.Context(), Options{Name: "local", URI: dmn.URI(), Pool: "default", Network: "labctl"})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// TestTLS reaches the test's libvirtd over qemu+tls-style URIs on
// 127.0.0.1, with the CA and client certificate from lab.yaml's fields or
// from pkipath=, and is refused with a certificate of another CA.
func TestTLS(t *testing.T) {
	dmn := testLibvirtd(t)
	uri := "test+tls://127.0.0.1:" + dmn.TLSPort + "/default"
	files := TLSFiles{CAFile: dmn.CAFile, CertFile: dmn.CertFile, KeyFile: dmn.KeyFile}
	reach := func(t *testing.T, o Options) error {
		t.Helper()
		o.Name, o.Pool, o.Network = "tlshost", "default-pool", "default"
		d, err := New(t.Context(), o)
		if err != nil {
			return err
		}
		defer d.Close()
		// The test driver's own domain "test" is there, and not labctl's.
		if _, err := d.FindVM(t.Context(), "lab", "test"); err == nil || !strings.Contains(err.Error(), "labctl did not create it") {
			t.Errorf("FindVM(test) over TLS = %v", err)
		}
		return nil
	}
	t.Run("files from lab.yaml", func(t *testing.T) {
		if err := reach(t, Options{URI: uri, TLS: files}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("pkipath", func(t *testing.T) {
		dir := t.TempDir()
		for src, name := range map[string]string{dmn.CAFile: "cacert.pem", dmn.CertFile: "clientcert.pem", dmn.KeyFile: "clientkey.pem"} {
			if err := copyFile(src, filepath.Join(dir, name), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := reach(t, Options{URI: uri + "?pkipath=" + dir}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing CA at libvirt's path", func(t *testing.T) {
		if _, err := os.Stat("/etc/pki/CA/cacert.pem"); err == nil {
			t.Skip("this machine has /etc/pki/CA/cacert.pem")
		}
		err := reach(t, Options{URI: uri})
		if err == nil || !strings.Contains(err.Error(), "the CA certificate /etc/pki/CA/cacert.pem does not exist") || !strings.Contains(err.Error(), "hypervisors[].libvirt.tls") {
			t.Fatalf("without certificates: %v", err)
		}
	})
	// otherPKI is a CA and client certificate the daemon does not know.
	otherPKI := func(t *testing.T) *libvirttest.Daemon {
		other, err := libvirttest.NewPKI(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return other
	}
	t.Run("server of another CA", func(t *testing.T) {
		other := otherPKI(t)
		err := reach(t, Options{URI: uri, TLS: TLSFiles{CAFile: other.CAFile, CertFile: dmn.CertFile, KeyFile: dmn.KeyFile}})
		if err == nil || !strings.Contains(err.Error(), "is not valid for 127.0.0.1 under the CA "+other.CAFile) {
			t.Fatalf("with another CA: %v", err)
		}
	})
	t.Run("client certificate of another CA", func(t *testing.T) {
		other := otherPKI(t)
		err := reach(t, Options{URI: uri, TLS: TLSFiles{CAFile: dmn.CAFile, CertFile: other.CertFile, KeyFile: other.KeyFile}})
		if err == nil || !strings.Contains(err.Error(), "refused labctl's client certificate") {
			t.Fatalf("with a foreign client certificate: %v", err)
		}
	})
}

func TestNewCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := New(ctx, testOptions(t))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("New with a cancelled context = %v", err)
	}
}

// A lookup on the daemon fails by libvirt's error code, not its text.
func TestErrorCodes(t *testing.T) {
	d, err := New(t.Context(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = d.l.DomainLookupByName("labctl-no-such-domain")
	if !isCode(err, 42) { // VIR_ERR_NO_DOMAIN in virterror.h
		t.Fatalf("lookup of a missing domain = %#v, want code 42", err)
	}
	if _, err := d.FindVM(t.Context(), "lab", "labctl-no-such-domain"); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("FindVM = %v, want ErrNotFound", err)
	}
}
