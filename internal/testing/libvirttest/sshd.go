package libvirttest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// SSHD is a test's own OpenSSH sshd (the machine's /usr/sbin/sshd) on
// 127.0.0.1, with its own host key, config and authorized_keys, through
// which qemu+ssh:// URIs reach a libvirtd the way libvirt's ssh transport
// does (nc or virt-ssh-helper on the daemon's socket). Its user is the
// one running the test (root in CI), so no account is made.
type SSHD struct {
	Port    string
	HostKey ssh.PublicKey
	// KeyFile is a private key sshd lets in; Key is its signer.
	KeyFile string
	Key     ssh.Signer
	Login   string
}

// NewKey makes an ed25519 key.
func NewKey(t testing.TB) (ed25519.PrivateKey, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return priv, s
}

// WriteKey writes priv as ssh-keygen leaves a key (OpenSSH PEM, 0600).
func WriteKey(t testing.TB, path string, priv ed25519.PrivateKey) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

// KnownHostsLine is the known_hosts line for this sshd and key.
func (s *SSHD) KnownHostsLine(key ssh.PublicKey) string {
	return knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:" + s.Port)}, key)
}

// StartSSHD starts an sshd for the test; it is killed with its sessions
// when the test ends. Without sshd, nc or root the test skips, or fails
// under CI or LABCTL_REQUIRE_LIBVIRT.
func StartSSHD(t testing.TB) *SSHD {
	t.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		skipOrFailWhy(t, "sshd is missing: apt-get install openssh-server netcat-openbsd")
	}
	if _, err := exec.LookPath("nc"); err != nil {
		skipOrFailWhy(t, "nc is missing: apt-get install netcat-openbsd")
	}
	if os.Geteuid() != 0 {
		skipOrFailWhy(t, "the test's sshd needs root")
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port, release, err := testbed.ReservePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	s := &SSHD{Port: strconv.Itoa(port), Login: me.Username, KeyFile: filepath.Join(dir, "client_ed25519")}
	hostPriv, hostSigner := NewKey(t)
	s.HostKey = hostSigner.PublicKey()
	WriteKey(t, filepath.Join(dir, "host_ed25519"), hostPriv)
	clientPriv, clientSigner := NewKey(t)
	s.Key = clientSigner
	WriteKey(t, s.KeyFile, clientPriv)
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientSigner.PublicKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	// Forwarding is off: libvirt's transport needs none, only a command.
	conf := fmt.Sprintf(`Port %s
ListenAddress 127.0.0.1
HostKey %s
PidFile none
UsePAM no
StrictModes no
AuthorizedKeysFile %s
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers %s
AllowTcpForwarding no
AllowStreamLocalForwarding no
X11Forwarding no
PrintMotd no
LogLevel VERBOSE
`, s.Port, filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "authorized_keys"), s.Login)
	cfg := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// sshd insists on its privilege separation folder.
	if _, err := os.Stat("/run/sshd"); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove("/run/sshd") })
	}
	// The log is a file: sshd's session children may hold it open after
	// sshd is gone, and a pipe would then keep Wait waiting.
	logPath := filepath.Join(dir, "sshd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(sshd, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// sshd and its sessions, by process group: the group of the sshd
		// this test started.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("sshd log:\n%s", log)
		}
	})
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+s.Port)
		if err == nil {
			_ = c.Close()
			return s
		}
		if i == 200 {
			t.Fatalf("sshd does not listen on 127.0.0.1:%s: %v", s.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
