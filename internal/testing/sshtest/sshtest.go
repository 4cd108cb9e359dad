// Package sshtest plays a labctl VM's sshd on loopback, for tests that
// stand in for a booting VM (the fake PVE, the in-memory hypervisor). It
// copies what a cloud image with labctl's cloud-init offers, and no more:
//   - OpenSSH's sshd serving the host key cloud-init wrote from the
//     user-data's ssh_keys (cloud-init cloudinit/config/cc_ssh.py), and
//     accepting only the user's authorized key;
//   - an exec channel (RFC 4254 section 6.5) whose exit-status (section
//     6.10) and stderr are those of sudo and GNU coreutils cat: 0 and the
//     file, or 1 and "cat: FILE: No such file or directory".
//
// Before SetHostKey it closes every connection, as a VM does whose sshd is
// not up yet.
package sshtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/kdomanski/iso9660"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
)

// Guest is one VM's sshd.
type Guest struct {
	Addr netip.AddrPort

	user       string
	authorized ssh.PublicKey

	mu      sync.Mutex
	hostKey func() ssh.Signer
	files   func(path string) ([]byte, bool)
	run     func(cmd string) (output string, status uint32)
	logins  int
}

// Start listens on 127.0.0.1 for user, who logs in with authorized.
func Start(t testing.TB, user string, authorized ssh.PublicKey) *Guest {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Guest{Addr: netip.MustParseAddrPort(ln.Addr().String()), user: user, authorized: authorized,
		files: func(string) ([]byte, bool) { return nil, false }}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); g.serve(c) }()
		}
	}()
	return g
}

// SetHostKey brings sshd up with the VM's host key.
func (g *Guest) SetHostKey(s ssh.Signer) { g.HostKeyFrom(func() ssh.Signer { return s }) }

// HostKeyFrom asks f for the host key on each connection; nil means sshd
// is not up yet (cloud-init has not written the key).
func (g *Guest) HostKeyFrom(f func() ssh.Signer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hostKey = f
}

// ServeFiles answers reads; ok false means the file does not exist.
func (g *Guest) ServeFiles(f func(path string) ([]byte, bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.files = f
}

// ServeCommands answers every command but the cat of ServeFiles, as the
// guest's shell would: what the test plays there (k3s's install script,
// for the k3s upgrade) with its output and exit status. Without it the
// guest refuses them with status 127.
func (g *Guest) ServeCommands(f func(cmd string) (output string, status uint32)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.run = f
}

// Logins counts the sessions that logged in.
func (g *Guest) Logins() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logins
}

var catRe = regexp.MustCompile(`^sudo -n cat -- '(/[^']*)'$`)

func (g *Guest) serve(c net.Conn) {
	defer c.Close()
	g.mu.Lock()
	f := g.hostKey
	g.mu.Unlock()
	var hk ssh.Signer
	if f != nil {
		hk = f()
	}
	if hk == nil {
		return // sshd is not up yet
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(m ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if m.User() == g.user && bytes.Equal(key.Marshal(), g.authorized.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("Permission denied (publickey)")
		},
	}
	cfg.AddHostKey(hk)
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	g.mu.Lock()
	g.logins++
	g.mu.Unlock()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go g.session(ch, creqs)
	}
}

func (g *Guest) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for r := range reqs {
		if r.Type != "exec" {
			_ = r.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(r.Payload, &p); err != nil {
			_ = r.Reply(false, nil)
			return
		}
		_ = r.Reply(true, nil)
		status := uint32(0)
		g.mu.Lock()
		run := g.run
		g.mu.Unlock()
		if m := catRe.FindStringSubmatch(p.Command); m == nil && run != nil {
			var out string
			out, status = run(p.Command)
			_, _ = ch.Write([]byte(out))
		} else if m == nil {
			fmt.Fprintf(ch.Stderr(), "sshtest: this guest runs only \"sudo -n cat -- '<path>'\", not %q\n", p.Command)
			status = 127
		} else {
			g.mu.Lock()
			data, ok := g.files(m[1])
			g.mu.Unlock()
			if ok {
				_, _ = ch.Write(data)
			} else {
				fmt.Fprintf(ch.Stderr(), "cat: %s: No such file or directory\n", m[1])
				status = 1
			}
		}
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
		return
	}
}

// HostKeyFromUserData is the host key labctl put in a #cloud-config
// document's ssh_keys, read as cloud-init's cc_ssh reads it.
func HostKeyFromUserData(ud []byte) (ssh.Signer, error) {
	var doc struct {
		SSHKeys map[string]string `yaml:"ssh_keys"`
	}
	if err := yaml.Unmarshal(ud, &doc); err != nil {
		return nil, fmt.Errorf("user-data: %w", err)
	}
	priv, ok := doc.SSHKeys["ed25519_private"]
	if !ok {
		return nil, errors.New("user-data has no ssh_keys.ed25519_private")
	}
	s, err := ssh.ParsePrivateKey([]byte(priv))
	if err != nil {
		return nil, fmt.Errorf("user-data ssh_keys.ed25519_private: %w", err)
	}
	if pub := strings.TrimSpace(doc.SSHKeys["ed25519_public"]); pub != strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey()))) {
		return nil, fmt.Errorf("user-data ssh_keys.ed25519_public %q is not the private key's public half", pub)
	}
	return s, nil
}

// SeedFiles reads a NoCloud seed ISO as cloud-init's NoCloud datasource
// does: its volume label and its files by name.
func SeedFiles(iso []byte) (label string, files map[string]string, err error) {
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		return "", nil, fmt.Errorf("seed ISO: %w", err)
	}
	if label, err = img.Label(); err != nil {
		return "", nil, fmt.Errorf("seed ISO label: %w", err)
	}
	root, err := img.RootDir()
	if err != nil {
		return "", nil, fmt.Errorf("seed ISO: %w", err)
	}
	kids, err := root.GetChildren()
	if err != nil {
		return "", nil, fmt.Errorf("seed ISO: %w", err)
	}
	files = map[string]string{}
	for _, f := range kids {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(f.Reader()); err != nil {
			return "", nil, fmt.Errorf("seed ISO %s: %w", f.Name(), err)
		}
		files[f.Name()] = buf.String()
	}
	return label, files, nil
}

// UserDataFromSeedISO reads user-data from a NoCloud seed ISO.
func UserDataFromSeedISO(iso []byte) ([]byte, error) {
	_, files, err := SeedFiles(iso)
	if err != nil {
		return nil, err
	}
	for name, data := range files {
		if strings.EqualFold(name, "user-data") {
			return []byte(data), nil
		}
	}
	return nil, errors.New("seed ISO has no user-data")
}

// UserKey makes the user's key pair as ssh-keygen -t ed25519 -N ” does:
// the private file (0600) and the .pub beside it, in a temporary folder.
// It returns the .pub path and the public key.
func UserKey(t testing.TB) (string, ssh.PublicKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test@labctl")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file+".pub", ssh.MarshalAuthorizedKey(s.PublicKey()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file + ".pub", s.PublicKey()
}
