// Package vmssh reaches labctl's own VMs over SSH, with nothing trusted on
// first use: labctl makes each VM's host key itself and hands it over
// through cloud-init (ssh_keys), so every connection, the first included,
// is checked against a key labctl already knows. The user logs in with
// the key lab.yaml authorizes on the VM (management.sshPublicKeys or
// sshPublicKeyFile), taken from ssh-agent or from the private key file
// beside the public one.
//
// It needs nothing in the guest beyond sshd and sudo, which every cloud
// image has: no guest agent.
package vmssh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/files"
)

// ErrNotFound is returned by ReadFile when the file does not exist (yet).
var ErrNotFound = errors.New("no such file")

// ErrNotReady means sshd did not answer yet (the VM still boots).
var ErrNotReady = errors.New("sshd does not answer yet")

// HostKey is a VM's SSH host key as labctl made it.
type HostKey struct {
	signer  ssh.Signer
	private []byte // OpenSSH PEM
}

// GenerateHostKey makes a new ed25519 host key.
func GenerateHostKey() (HostKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return HostKey{}, fmt.Errorf("making an SSH host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "labctl host key")
	if err != nil {
		return HostKey{}, fmt.Errorf("making an SSH host key: %w", err)
	}
	return parseHostKey(pem.EncodeToMemory(block))
}

func parseHostKey(pemBytes []byte) (HostKey, error) {
	s, err := ssh.ParsePrivateKey(pemBytes)
	if err != nil {
		return HostKey{}, err
	}
	if s.PublicKey().Type() != ssh.KeyAlgoED25519 {
		return HostKey{}, fmt.Errorf("a %s key, want ssh-ed25519", s.PublicKey().Type())
	}
	return HostKey{signer: s, private: pemBytes}, nil
}

// LoadHostKey reads the host key file labctl wrote when it made the VM.
func LoadHostKey(file string) (HostKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return HostKey{}, err
	}
	k, err := parseHostKey(data)
	if err != nil {
		return HostKey{}, fmt.Errorf("reading the VM's SSH host key %s: %w", file, err)
	}
	return k, nil
}

// LoadOrCreateHostKey reads the host key at file, or makes one and
// stores it there with mode 0600. Keeping it means a VM made again gets
// the same key.
func LoadOrCreateHostKey(file string) (HostKey, error) {
	k, err := LoadHostKey(file)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if k, err = GenerateHostKey(); err != nil {
		return HostKey{}, err
	}
	if err := files.WritePrivate(file, k.private); err != nil {
		return HostKey{}, fmt.Errorf("storing the VM's SSH host key: %w", err)
	}
	return k, nil
}

// PublicKey is the key the VM's sshd must present.
func (k HostKey) PublicKey() ssh.PublicKey { return k.signer.PublicKey() }

// Fingerprint is the key's SHA256:... fingerprint, as ssh-keygen -l shows it.
func (k HostKey) Fingerprint() string { return ssh.FingerprintSHA256(k.PublicKey()) }

// CloudInit is the key pair as cloud-init's ssh_keys takes it. The private
// half goes only into the VM's cloud-init data, never into output.
func (k HostKey) CloudInit() *cloudinit.HostKey {
	return &cloudinit.HostKey{Private: k.private, Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey())))}
}

// Signer serves the key; tests play the VM's sshd with it.
func (k HostKey) Signer() ssh.Signer { return k.signer }

// Target is one VM to log in to.
type Target struct {
	Addr    netip.AddrPort
	User    string
	HostKey ssh.PublicKey
	Auth    []ssh.Signer
}

// maxFile bounds what ReadFile returns.
const maxFile = 16 << 20

// handshakeTimeout bounds one connection attempt; a booting VM that
// accepts TCP but whose sshd hangs is retried rather than waited on.
const handshakeTimeout = 20 * time.Second

// ReadFile reads a root-owned file in the VM with 'sudo -n cat' over one
// SSH session. A missing file wraps ErrNotFound; a VM whose sshd does not
// answer yet wraps ErrNotReady; a host key other than t.HostKey is an
// error that names both fingerprints.
func ReadFile(ctx context.Context, t Target, file string) ([]byte, error) {
	if !path.IsAbs(file) || path.Clean(file) != file || strings.ContainsAny(file, "'\\\n") {
		return nil, fmt.Errorf("reading %q over SSH: the path must be absolute, clean and unquoted", file)
	}
	var stdout, stderr bytes.Buffer
	err := run(ctx, t, "sudo -n cat -- '"+file+"'", &limited{w: &stdout, n: maxFile}, &limited{w: &stderr, n: 4096})
	var dialErr *dialError
	switch {
	case errors.As(err, &dialErr):
		return nil, dialErr.err
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("reading %s on %s: %w", file, t.Addr, ctx.Err())
	}
	if stdout.Len() > maxFile {
		return nil, fmt.Errorf("reading %s on %s: larger than %d bytes", file, t.Addr, maxFile)
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "No such file or directory") {
			return nil, fmt.Errorf("reading %s on %s: %w", file, t.Addr, ErrNotFound)
		}
		if strings.Contains(msg, "password is required") || strings.Contains(msg, "sudo:") {
			return nil, fmt.Errorf("reading %s on %s as %s: sudo refused (%s); labctl's cloud-init gives the user passwordless sudo, so was this VM made by labctl?", file, t.Addr, t.User, msg)
		}
		return nil, fmt.Errorf("reading %s on %s: %w (%s)", file, t.Addr, err, msg)
	}
	return stdout.Bytes(), nil
}

// Run runs command as root ('sudo -n sh -c') over one SSH session and
// returns its output (stdout and stderr, the last 64 KiB). progress, when
// set, gets each line as it comes. Cancelling ctx closes the connection.
func Run(ctx context.Context, t Target, command string, progress func(line string)) ([]byte, error) {
	out := &tail{n: 64 << 10, progress: progress}
	err := run(ctx, t, "sudo -n sh -c '"+strings.ReplaceAll(command, "'", `'\''`)+"'", out, out)
	var dialErr *dialError
	switch {
	case errors.As(err, &dialErr):
		return nil, dialErr.err
	case ctx.Err() != nil:
		return out.bytes(), fmt.Errorf("running a command on %s: %w", t.Addr, ctx.Err())
	case err != nil:
		return out.bytes(), fmt.Errorf("running a command on %s as %s: %w; its last output:\n%s", t.Addr, t.User, err, strings.TrimSpace(string(out.bytes())))
	}
	return out.bytes(), nil
}

// dialError is a failure to reach or log in to the VM, returned as is.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }

// run runs cmd over one SSH session; cancelling ctx closes the
// connection, and run then returns ctx's error.
func run(ctx context.Context, t Target, cmd string, stdout, stderr io.Writer) error {
	c, err := dial(ctx, t)
	if err != nil {
		return &dialError{err}
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		return fmt.Errorf("opening an SSH session on %s: %w", t.Addr, err)
	}
	defer sess.Close()
	sess.Stdout, sess.Stderr = stdout, stderr
	done := make(chan error, 1)
	go func() { done <- sess.Run(cmd) }()
	select {
	case <-ctx.Done():
		_ = c.Close()
		return ctx.Err()
	case err = <-done:
		return err
	}
}

// tail keeps the last n bytes written and hands each line to progress.
type tail struct {
	mu       sync.Mutex
	buf      []byte
	n        int
	line     []byte
	progress func(string)
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = t.buf[len(t.buf)-t.n:]
	}
	if t.progress != nil {
		t.line = append(t.line, p...)
		for {
			i := bytes.IndexByte(t.line, '\n')
			if i < 0 {
				break
			}
			if l := strings.TrimSpace(string(t.line[:i])); l != "" {
				t.progress(l)
			}
			t.line = t.line[i+1:]
		}
	}
	return len(p), nil
}

func (t *tail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// dial connects and logs in; ctx cancels the dial and the handshake.
func dial(ctx context.Context, t Target) (*ssh.Client, error) {
	if len(t.Auth) == 0 {
		return nil, errors.New("no SSH key to log in with")
	}
	d := net.Dialer{Timeout: handshakeTimeout}
	conn, err := d.DialContext(ctx, "tcp", t.Addr.String())
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connecting to %s: %w", t.Addr, ctx.Err())
		}
		return nil, fmt.Errorf("connecting to sshd on %s: %w: %w", t.Addr, ErrNotReady, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	var presented ssh.PublicKey
	cfg := &ssh.ClientConfig{
		User: t.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(t.Auth...)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			presented = key
			return ssh.FixedHostKey(t.HostKey)(t.Addr.String(), nil, key)
		},
		// Ask for the one key type labctl gave the VM.
		HostKeyAlgorithms: []string{t.HostKey.Type()},
		Timeout:           handshakeTimeout,
	}
	cc, chans, reqs, err := ssh.NewClientConn(conn, t.Addr.String(), cfg)
	if err != nil {
		_ = conn.Close()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("connecting to %s: %w", t.Addr, ctx.Err())
		case presented != nil && !bytes.Equal(presented.Marshal(), t.HostKey.Marshal()):
			return nil, fmt.Errorf("refusing %s: it presented SSH host key %s, not %s, the key labctl gave the VM through cloud-init; another machine holds this address, or the VM was made by another labctl (its key is stored elsewhere)",
				t.Addr, ssh.FingerprintSHA256(presented), ssh.FingerprintSHA256(t.HostKey))
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, fmt.Errorf("logging in to %s as %s: the VM does not accept your SSH key (%w); labctl logs in with the key lab.yaml puts on the VM: load it into ssh-agent (ssh-add) or keep its private file beside management.sshPublicKeyFile", t.Addr, t.User, err)
		default:
			// sshd not up yet, or the VM still writes its keys.
			return nil, fmt.Errorf("SSH handshake with %s: %w: %w", t.Addr, ErrNotReady, err)
		}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// limited writes at most n+1 bytes, so the caller can tell "over n".
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	keep := len(p)
	if keep > l.n+1 {
		keep = l.n + 1
	}
	if keep > 0 {
		_, _ = l.w.Write(p[:keep])
		l.n -= keep
	}
	return len(p), nil
}
