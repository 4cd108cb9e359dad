package libvirt

// qemu+ssh:// over loopback: the test starts its own sshd (OpenSSH, the
// machine's /usr/sbin/sshd) on 127.0.0.1 with its own host key, config
// and authorized_keys, and reaches the test's libvirtd through it, the
// way libvirt's ssh transport does (nc on the daemon's socket). The ssh
// user is the one running the test (root in CI): its keys and
// known_hosts come from the test's own HOME, so no account is made.

import (
	"context"
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
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/labctl/labctl/internal/testing/testbed"
)

type testSSHD struct {
	port    string
	hostKey ssh.PublicKey
	// keyFile is a private key sshd lets in; key is its signer.
	keyFile string
	key     ssh.Signer
	login   string
}

func newKey(t *testing.T) (ed25519.PrivateKey, ssh.Signer) {
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

func writeKey(t *testing.T, path string, priv ed25519.PrivateKey) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	p, release, err := testbed.ReservePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return strconv.Itoa(p)
}

func startSSHD(t *testing.T) *testSSHD {
	t.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		skipOrFail(t, "sshd is missing: apt-get install openssh-server netcat-openbsd")
	}
	if _, err := exec.LookPath("nc"); err != nil {
		skipOrFail(t, "nc is missing: apt-get install netcat-openbsd")
	}
	if os.Geteuid() != 0 {
		skipOrFail(t, "the test's sshd needs root")
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &testSSHD{port: freePort(t), login: me.Username, keyFile: filepath.Join(dir, "client_ed25519")}
	hostPriv, hostSigner := newKey(t)
	s.hostKey = hostSigner.PublicKey()
	writeKey(t, filepath.Join(dir, "host_ed25519"), hostPriv)
	clientPriv, clientSigner := newKey(t)
	s.key = clientSigner
	writeKey(t, s.keyFile, clientPriv)
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
`, s.port, filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "authorized_keys"), s.login)
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
		c, err := net.Dial("tcp", "127.0.0.1:"+s.port)
		if err == nil {
			_ = c.Close()
			return s
		}
		if i == 200 {
			t.Fatalf("sshd does not listen on 127.0.0.1:%s: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// home makes a HOME for the ssh client, known_hosts holding hostKeys
// for the test's sshd, and no agent.
func (s *testSSHD) home(t *testing.T, hostKeys ...ssh.PublicKey) string {
	t.Helper()
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, k := range hostKeys {
		lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:" + s.port)}, k))
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	return home
}

func (s *testSSHD) uri(login, socket string) string {
	return fmt.Sprintf("test+ssh://%s@127.0.0.1:%s/default?socket=%s", login, s.port, socket)
}

func sshOptions(uri, keyFile string) Options {
	return Options{Name: "remote", URI: uri, SSHKeyFile: keyFile, Pool: "default-pool", Network: "default", DialTimeout: 30 * time.Second}
}

// TestSSHReachesTheSameDaemon defines a pool through ssh and finds it
// through the daemon's local socket, with the key from a file and then
// from ssh-agent.
func TestSSHReachesTheSameDaemon(t *testing.T) {
	dmn := testLibvirtd(t)
	s := startSSHD(t)
	s.home(t, s.hostKey)

	o := sshOptions(s.uri(s.login, dmn.Sock), s.keyFile)
	o.Pool, o.PoolPath = uniq("sshpool"), "/labctl-ssh-pool"
	d, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.preparePool(t.Context()); err != nil {
		t.Fatal(err)
	}
	local := testOptions(t)
	local.Pool = o.Pool
	ld, err := New(t.Context(), local)
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Close()
	if st, err := ld.poolState(); err != nil || st != active {
		t.Errorf("the pool made over ssh, seen on the local socket: state %v, %v; want active", st, err)
	}
	if err := d.RemovePool(t.Context()); err != nil {
		t.Fatal(err)
	}

	t.Run("key from ssh-agent", func(t *testing.T) {
		keyring := agent.NewKeyring()
		priv, err := os.ReadFile(s.keyFile)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := ssh.ParseRawPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		if err := keyring.Add(agent.AddedKey{PrivateKey: raw}); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(t.TempDir(), "agent.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { _ = agent.ServeAgent(keyring, c); _ = c.Close() }()
			}
		}()
		t.Setenv("SSH_AUTH_SOCK", sock)
		d, err := New(t.Context(), sshOptions(s.uri(s.login, dmn.Sock), "")) // no key file: the HOME has none
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Close()
	})
}

// TestSSHUnknownHostKey refuses a host missing from known_hosts, with the
// command that adds it; running that command lets the next try in.
func TestSSHUnknownHostKey(t *testing.T) {
	dmn := testLibvirtd(t)
	s := startSSHD(t)
	home := s.home(t)
	o := sshOptions(s.uri(s.login, dmn.Sock), s.keyFile)
	_, err := New(t.Context(), o)
	fix := "ssh-keyscan -p " + s.port + " -H 127.0.0.1 >> ~/.ssh/known_hosts"
	if err == nil || !strings.Contains(err.Error(), "is not in ~/.ssh/known_hosts") || !strings.Contains(err.Error(), fix) {
		t.Fatalf("unknown host: %v; want a refusal with %q", err, fix)
	}
	t.Logf("unknown host key: %v", err)
	if !strings.Contains(err.Error(), ssh.FingerprintSHA256(s.hostKey)) {
		t.Errorf("the error does not show the key's fingerprint: %v", err)
	}
	cmd := exec.CommandContext(t.Context(), "sh", "-c", fix)
	cmd.Env = append(os.Environ(), "HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", fix, err, out)
	}
	d, err := New(t.Context(), o)
	if err != nil {
		t.Fatalf("after %s: %v", fix, err)
	}
	_ = d.Close()
}

func TestSSHChangedHostKey(t *testing.T) {
	dmn := testLibvirtd(t)
	s := startSSHD(t)
	_, other := newKey(t)
	s.home(t, other.PublicKey())
	_, err := New(t.Context(), sshOptions(s.uri(s.login, dmn.Sock), s.keyFile))
	if err == nil || !strings.Contains(err.Error(), "host key of 127.0.0.1:"+s.port+" changed") || !strings.Contains(err.Error(), "ssh-keygen -R '[127.0.0.1]:"+s.port+"'") {
		t.Fatalf("changed host key: %v", err)
	}
	t.Logf("changed host key: %v", err)
}

func TestSSHLoginRefused(t *testing.T) {
	dmn := testLibvirtd(t)
	s := startSSHD(t)
	s.home(t, s.hostKey)
	t.Run("wrong user", func(t *testing.T) {
		_, err := New(t.Context(), sshOptions(s.uri("labctl-no-such-user", dmn.Sock), s.keyFile))
		if err == nil || !strings.Contains(err.Error(), `refused the ssh login of user "labctl-no-such-user"`) || !strings.Contains(err.Error(), "authorized_keys") {
			t.Fatalf("wrong user: %v", err)
		}
		t.Logf("wrong user: %v", err)
	})
	t.Run("key not authorized", func(t *testing.T) {
		priv, _ := newKey(t)
		stranger := filepath.Join(t.TempDir(), "id_ed25519")
		writeKey(t, stranger, priv)
		_, err := New(t.Context(), sshOptions(s.uri(s.login, dmn.Sock), stranger))
		if err == nil || !strings.Contains(err.Error(), "refused the ssh login of user \""+s.login+"\" with the key "+stranger) {
			t.Fatalf("unauthorized key: %v", err)
		}
	})
	t.Run("no key at all", func(t *testing.T) {
		_, err := New(t.Context(), sshOptions(s.uri(s.login, dmn.Sock), ""))
		if err == nil || !strings.Contains(err.Error(), "no ssh key to log in with") || !strings.Contains(err.Error(), "sshKeyFile") {
			t.Fatalf("no key: %v", err)
		}
	})
}

// TestSSHNoLibvirtd logs in fine, but no daemon listens on the host's
// socket: nc says so, and labctl passes it on with the fix.
func TestSSHNoLibvirtd(t *testing.T) {
	s := startSSHD(t)
	s.home(t, s.hostKey)
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	_, err := New(t.Context(), sshOptions(s.uri(s.login, sock), s.keyFile))
	if err == nil || !strings.Contains(err.Error(), "libvirtd is not running on 127.0.0.1 (its socket "+sock+" is missing)") {
		t.Fatalf("no daemon behind ssh: %v", err)
	}
	t.Logf("no daemon behind ssh: %v", err)
}

// TestSSHHostNotAnswering dials a port that takes the TCP connection and
// never says a word (testbed.StartSilent): the dial timeout ends the
// wait, and a cancelled context ends it at once.
func TestSSHHostNotAnswering(t *testing.T) {
	_, port, err := net.SplitHostPort(testbed.StartSilent(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &testSSHD{port: port}
	_, signer := newKey(t)
	s.home(t, signer.PublicKey())
	priv, _ := newKey(t)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	writeKey(t, keyFile, priv)

	o := sshOptions("qemu+ssh://me@127.0.0.1:"+port+"/system", keyFile)
	o.DialTimeout = 500 * time.Millisecond
	_, err = New(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1 did not answer within 500ms") || !strings.Contains(err.Error(), "sshd listens on port "+port) {
		t.Fatalf("silent host: %v", err)
	}
	t.Logf("silent host: %v", err)

	o.DialTimeout = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = New(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while waiting on a silent host: %v; want context.Canceled (the 1h timeout cannot have passed)", err)
	}
}

// With Options.KnownHostsFile (the Cluster API provider's, from its
// credentials Secret), that file alone says which host keys are trusted:
// ~/.ssh/known_hosts neither lets a host in nor keeps it out.
func TestSSHKnownHostsFileAlone(t *testing.T) {
	dmn := testLibvirtd(t)
	s := startSSHD(t)
	_, other := newKey(t)
	writeKnown := func(keys ...ssh.PublicKey) string {
		var lines []string
		for _, k := range keys {
			lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize("127.0.0.1:" + s.port)}, k))
		}
		p := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// HOME trusts another key; the file trusts the host's: it connects.
	s.home(t, other.PublicKey())
	o := sshOptions(s.uri(s.login, dmn.Sock), s.keyFile)
	o.KnownHostsFile = writeKnown(s.hostKey)
	d, err := New(t.Context(), o)
	if err != nil {
		t.Fatalf("with the host's key in KnownHostsFile: %v", err)
	}
	_ = d.Close()

	// HOME trusts the host's key; the file does not: refused, naming the file.
	s.home(t, s.hostKey)
	o.KnownHostsFile = writeKnown(other.PublicKey())
	_, err = New(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "changed") || !strings.Contains(err.Error(), o.KnownHostsFile) {
		t.Fatalf("with another key in KnownHostsFile: %v; want the changed-key refusal naming %s", err, o.KnownHostsFile)
	}
	o.KnownHostsFile = writeKnown()
	_, err = New(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "is not in "+o.KnownHostsFile) {
		t.Fatalf("with an empty KnownHostsFile: %v; want the unknown-host refusal naming it", err)
	}
}
