package libvirt

// qemu+ssh:// over loopback: the test starts its own sshd (OpenSSH, the
// machine's /usr/sbin/sshd) on 127.0.0.1 with its own host key, config
// and authorized_keys, and reaches the test's libvirtd through it, the
// way libvirt's ssh transport does (nc on the daemon's socket). The ssh
// user is the one running the test (root in CI): its keys and
// known_hosts come from the test's own HOME, so no account is made.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// testSSHD is the test's sshd (libvirttest.SSHD) with this package's
// helpers.
type testSSHD struct{ *libvirttest.SSHD }

func startSSHD(t *testing.T) *testSSHD { return &testSSHD{libvirttest.StartSSHD(t)} }

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
		lines = append(lines, s.KnownHostsLine(k))
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	return home
}

func (s *testSSHD) uri(login, socket string) string {
	return fmt.Sprintf("test+ssh://%s@127.0.0.1:%s/default?socket=%s", login, s.Port, socket)
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
	s.home(t, s.HostKey)

	o := sshOptions(s.uri(s.Login, dmn.Sock), s.KeyFile)
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
		priv, err := os.ReadFile(s.KeyFile)
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
		d, err := New(t.Context(), sshOptions(s.uri(s.Login, dmn.Sock), "")) // no key file: the HOME has none
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
	o := sshOptions(s.uri(s.Login, dmn.Sock), s.KeyFile)
	_, err := New(t.Context(), o)
	fix := "ssh-keyscan -p " + s.Port + " -H 127.0.0.1 >> ~/.ssh/known_hosts"
	if err == nil || !strings.Contains(err.Error(), "is not in ~/.ssh/known_hosts") || !strings.Contains(err.Error(), fix) {
		t.Fatalf("unknown host: %v; want a refusal with %q", err, fix)
	}
	t.Logf("unknown host key: %v", err)
	if !strings.Contains(err.Error(), ssh.FingerprintSHA256(s.HostKey)) {
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
	_, other := libvirttest.NewKey(t)
	s.home(t, other.PublicKey())
	_, err := New(t.Context(), sshOptions(s.uri(s.Login, dmn.Sock), s.KeyFile))
	if err == nil || !strings.Contains(err.Error(), "host key of 127.0.0.1:"+s.Port+" changed") || !strings.Contains(err.Error(), "ssh-keygen -R '[127.0.0.1]:"+s.Port+"'") {
		t.Fatalf("changed host key: %v", err)
	}
	t.Logf("changed host key: %v", err)
}

func TestSSHLoginRefused(t *testing.T) {
	dmn := testLibvirtd(t)
	s := startSSHD(t)
	s.home(t, s.HostKey)
	t.Run("wrong user", func(t *testing.T) {
		_, err := New(t.Context(), sshOptions(s.uri("labctl-no-such-user", dmn.Sock), s.KeyFile))
		if err == nil || !strings.Contains(err.Error(), `refused the ssh login of user "labctl-no-such-user"`) || !strings.Contains(err.Error(), "authorized_keys") {
			t.Fatalf("wrong user: %v", err)
		}
		t.Logf("wrong user: %v", err)
	})
	t.Run("key not authorized", func(t *testing.T) {
		priv, _ := libvirttest.NewKey(t)
		stranger := filepath.Join(t.TempDir(), "id_ed25519")
		libvirttest.WriteKey(t, stranger, priv)
		_, err := New(t.Context(), sshOptions(s.uri(s.Login, dmn.Sock), stranger))
		if err == nil || !strings.Contains(err.Error(), "refused the ssh login of user \""+s.Login+"\" with the key "+stranger) {
			t.Fatalf("unauthorized key: %v", err)
		}
	})
	t.Run("no key at all", func(t *testing.T) {
		_, err := New(t.Context(), sshOptions(s.uri(s.Login, dmn.Sock), ""))
		if err == nil || !strings.Contains(err.Error(), "no ssh key to log in with") || !strings.Contains(err.Error(), "sshKeyFile") {
			t.Fatalf("no key: %v", err)
		}
	})
}

// TestSSHNoLibvirtd logs in fine, but no daemon listens on the host's
// socket: nc says so, and labctl passes it on with the fix.
func TestSSHNoLibvirtd(t *testing.T) {
	s := startSSHD(t)
	s.home(t, s.HostKey)
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	_, err := New(t.Context(), sshOptions(s.uri(s.Login, sock), s.KeyFile))
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
	s := &testSSHD{&libvirttest.SSHD{Port: port}}
	_, signer := libvirttest.NewKey(t)
	s.home(t, signer.PublicKey())
	priv, _ := libvirttest.NewKey(t)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	libvirttest.WriteKey(t, keyFile, priv)

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
	_, other := libvirttest.NewKey(t)
	writeKnown := func(keys ...ssh.PublicKey) string {
		var lines []string
		for _, k := range keys {
			lines = append(lines, s.KnownHostsLine(k))
		}
		p := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// HOME trusts another key; the file trusts the host's: it connects.
	s.home(t, other.PublicKey())
	o := sshOptions(s.uri(s.Login, dmn.Sock), s.KeyFile)
	o.KnownHostsFile = writeKnown(s.HostKey)
	d, err := New(t.Context(), o)
	if err != nil {
		t.Fatalf("with the host's key in KnownHostsFile: %v", err)
	}
	_ = d.Close()

	// HOME trusts the host's key; the file does not: refused, naming the file.
	s.home(t, s.HostKey)
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
