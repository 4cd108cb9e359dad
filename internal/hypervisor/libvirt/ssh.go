package libvirt

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/sshkey"
	"github.com/labctl/labctl/internal/userhome"
)

// The ssh transport does what libvirt's own does (src/rpc/virnetclient.c,
// virNetClientSSHHelperCommand, and src/remote/remote_driver.c, libvirt
// 9.0): log in, run a helper that joins the session's stdin and stdout to
// the daemon's socket on the host, and speak libvirt's RPC over that.
// The helper is virt-ssh-helper when the host has it, else nc -U on the
// socket; with socket= in the URI it is always nc, and for session URIs
// always virt-ssh-helper (it finds the user's daemon itself).
//
// go-libvirt's own ssh dialer (socket/dialers/gossh.go) is not used: it
// asks sshd to forward the socket (direct-streamlocal), which sshd
// configs often forbid and libvirt never needs, takes no context, and
// leaves its ssh client open when the connection closes. Its ways are
// kept where they are right: the agent's and the key file's signers share
// one publickey method, and host keys are checked by knownhosts.

// remoteSocket is libvirtd's socket on the host for the nc helper, the
// path libvirt puts in its nc command for system URIs.
const remoteSocket = "/var/run/libvirt/libvirt-sock"

// helperCommand is the command run on the host, quoted as libvirt quotes
// it: once for the remote login shell, once for the sh -c inside.
func helperCommand(t target) string {
	sock := t.socket
	if sock == "" {
		sock = remoteSocket
	}
	nc := "if 'nc' -q 2>&1 | grep \"requires an argument\" >/dev/null 2>&1; then ARG=-q0;else ARG=;fi;'nc' $ARG -U " + shellQuote(shellQuote(sock))
	helper := "virt-ssh-helper '" + shellQuote(shellQuote(t.driver)) + "'"
	switch {
	case t.socket != "":
		return "sh -c '" + nc + "'"
	case t.session:
		return "sh -c '" + helper + "'"
	}
	return "sh -c 'which virt-ssh-helper 1>/dev/null 2>&1; if test $? = 0; then     " + helper + "; else    " + nc + "; fi'"
}

// shellQuote quotes s for a POSIX shell when it holds a shell
// metacharacter, as libvirt's virBufferEscapeShell (src/util/virbuffer.c)
// does. libvirt puts the nc socket path in unquoted; labctl quotes it too.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, "\r\t\n !\"#$&'()*;<>?[\\]^`{|}~") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// dialSSH logs in to the host and starts the helper; the returned
// connection is the helper's stdin and stdout.
func dialSSH(ctx context.Context, t target, o Options) (net.Conn, error) {
	port := portOr(t.port, "22")
	addr := net.JoinHostPort(t.host, port)
	login := t.user
	if login == "" {
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("the URI names no user and the current one is unknown (%w); write qemu+ssh://user@%s/system", err, t.host)
		}
		login = u.Username
	}
	known := knownHostsFiles()
	if o.KnownHostsFile != "" {
		known = []string{o.KnownHostsFile}
	}
	hk, err := newHostKeys(t.host, port, known)
	if err == nil && o.KnownHostsFile != "" {
		hk.where = o.KnownHostsFile
	}
	if err != nil {
		return nil, err
	}
	keyFile := o.SSHKeyFile
	if keyFile == "" {
		keyFile = t.keyFile
	}
	keys, err := sshKeys(keyFile)
	if err != nil {
		keys.close()
		return nil, fmt.Errorf("ssh to %s@%s: %w", login, t.host, err)
	}
	defer keys.close()
	cfg := &ssh.ClientConfig{
		User:              login,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(keys.signers...)},
		HostKeyCallback:   hk.check,
		HostKeyAlgorithms: hk.algorithms,
	}

	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, explainDial(err, addr, "sshd")
	}
	// Everything until the helper runs is bounded by ctx: closing the TCP
	// connection ends a handshake that hangs.
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	conn, err := startHelper(raw, addr, cfg, t)
	if !stop() {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, ctx.Err()
	}
	if err == nil {
		return conn, nil
	}
	_ = raw.Close()
	switch {
	case hk.err != nil:
		return nil, hk.err
	case strings.Contains(err.Error(), "unable to authenticate"):
		// x/crypto/ssh has no error type for a refused login, only this
		// message (client_auth.go).
		return nil, fmt.Errorf("%s refused the ssh login of user %q with %s: check the user in the URI (qemu+ssh://USER@%s/system) and that the key is in that user's ~/.ssh/authorized_keys on the host (ssh-copy-id %s@%s): %w",
			addr, login, keys.describe(), t.host, login, t.host, err)
	}
	return nil, fmt.Errorf("ssh to %s: %w", addr, err)
}

func startHelper(raw net.Conn, addr string, cfg *ssh.ClientConfig, t target) (*sshConn, error) {
	c, chans, reqs, err := ssh.NewClientConn(raw, addr, cfg)
	if err != nil {
		return nil, err
	}
	client := ssh.NewClient(c, chans, reqs)
	sess, err := client.NewSession()
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("opening an ssh session: %w", err)
	}
	conn := &sshConn{client: client, sess: sess, host: t.host, t: t, exited: make(chan struct{})}
	if conn.stdin, err = sess.StdinPipe(); err == nil {
		conn.stdout, err = sess.StdoutPipe()
	}
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("opening an ssh session: %w", err)
	}
	sess.Stderr = &conn.stderr
	if err := sess.Start(helperCommand(t)); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("starting libvirt's helper on %s: %w", t.host, err)
	}
	go func() {
		conn.exitErr = sess.Wait()
		close(conn.exited)
	}()
	return conn, nil
}

// sshConn is the helper's stdin and stdout on the host.
type sshConn struct {
	client *ssh.Client
	sess   *ssh.Session
	stdin  io.WriteCloser
	stdout io.Reader
	stderr tail
	host   string
	t      target

	exited  chan struct{}
	exitErr error
	once    sync.Once
}

func (c *sshConn) Read(p []byte) (int, error)  { return c.stdout.Read(p) }
func (c *sshConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }

func (c *sshConn) Close() error {
	c.once.Do(func() {
		_ = c.stdin.Close()
		_ = c.sess.Close()
		_ = c.client.Close()
	})
	return nil
}

func (c *sshConn) LocalAddr() net.Addr  { return c.client.LocalAddr() }
func (c *sshConn) RemoteAddr() net.Addr { return c.client.RemoteAddr() }

// Deadlines are not supported on an ssh channel; go-libvirt sets none,
// and labctl bounds the connect by closing the connection instead.
func (c *sshConn) SetDeadline(time.Time) error      { return nil }
func (c *sshConn) SetReadDeadline(time.Time) error  { return nil }
func (c *sshConn) SetWriteDeadline(time.Time) error { return nil }

// remoteFailure explains why the helper ended, when it did: what it wrote
// on stderr is the only account of a daemon that is not there.
func (c *sshConn) remoteFailure() error {
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		return nil
	}
	msg := strings.TrimSpace(c.stderr.String())
	sock := c.t.socket
	if sock == "" {
		sock = remoteSocket
	}
	var exit *ssh.ExitError
	switch {
	case errors.As(c.exitErr, &exit) && exit.ExitStatus() == 127:
		return fmt.Errorf("%s has neither virt-ssh-helper nor nc to reach libvirtd with: install libvirt-clients or netcat-openbsd there (%s)", c.host, msg)
	case strings.Contains(msg, "No such file or directory"), strings.Contains(msg, "Connection refused"):
		return fmt.Errorf("libvirtd is not running on %s (its socket %s is missing): start it there (systemctl start libvirtd): %s", c.host, sock, msg)
	case strings.Contains(msg, "Permission denied"):
		return fmt.Errorf("the ssh user on %s may not use libvirt's socket %s: log in as root, or add the user to the libvirt group there (usermod -aG libvirt USER): %s", c.host, sock, msg)
	case msg != "":
		return fmt.Errorf("libvirt's helper on %s failed: %s", c.host, msg)
	}
	return nil
}

// tail keeps the first 4 KiB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := 4096 - len(t.buf); room > 0 {
		t.buf = append(t.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// hostKeys checks the host's key against the known_hosts files ssh reads:
// ~/.ssh/known_hosts and /etc/ssh/ssh_known_hosts. An unknown or changed
// key is refused, with the command that fixes it.
type hostKeys struct {
	host, port string
	cb         ssh.HostKeyCallback // nil: no known_hosts file exists
	// algorithms are the key types known for the host, so the server is
	// asked for a key that can match (x/crypto/ssh otherwise takes the
	// server's first choice, and a host known by its ed25519 key that
	// prefers ecdsa would look changed).
	algorithms []string
	err        error // why the last check failed
	// where names the known_hosts file in errors; empty means ssh's own.
	where string
}

func knownHostsFiles() []string {
	var files []string
	if home, err := userhome.Dir(); err == nil {
		files = append(files, filepath.Join(home, ".ssh", "known_hosts"))
	}
	return append(files, "/etc/ssh/ssh_known_hosts")
}

func newHostKeys(host, port string, known []string) (*hostKeys, error) {
	h := &hostKeys{host: host, port: port}
	var files []string
	for _, f := range known {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
	}
	if len(files) == 0 {
		return h, nil
	}
	cb, err := knownhosts.New(files...)
	if err != nil {
		return nil, fmt.Errorf("reading the known hosts (%s): %w; fix or remove the bad line", strings.Join(files, ", "), err)
	}
	h.cb = cb
	// Ask with a key that cannot match: the error lists the known ones.
	probe, _ := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	var ke *knownhosts.KeyError
	if err := cb(net.JoinHostPort(host, port), &net.TCPAddr{}, probe); errors.As(err, &ke) {
		for _, k := range ke.Want {
			h.algorithms = appendAlgorithms(h.algorithms, k.Key.Type())
		}
	}
	return h, nil
}

func appendAlgorithms(algos []string, keyType string) []string {
	var add []string
	switch keyType {
	case ssh.KeyAlgoRSA:
		add = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	default:
		add = []string{keyType}
	}
	for _, a := range add {
		if !slices.Contains(algos, a) {
			algos = append(algos, a)
		}
	}
	return algos
}

// keyscan is the command that adds the host's key to known_hosts.
func (h *hostKeys) keyscan() string {
	if h.port == "22" {
		return "ssh-keyscan -H " + h.host + " >> ~/.ssh/known_hosts"
	}
	return "ssh-keyscan -p " + h.port + " -H " + h.host + " >> ~/.ssh/known_hosts"
}

func (h *hostKeys) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	h.err = nil
	var err error
	if h.cb == nil {
		err = &knownhosts.KeyError{}
	} else {
		err = h.cb(hostname, remote, key)
	}
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ke) && len(ke.Want) == 0:
		where, fix := "~/.ssh/known_hosts", h.keyscan()
		if h.where != "" {
			where, fix = h.where, strings.Replace(fix, "~/.ssh/known_hosts", h.where, 1)
		}
		h.err = fmt.Errorf("the ssh host key of %s (%s %s) is not in %s, and labctl does not trust unknown hosts. If it is your host's key (compare: ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub on the host), add it: %s",
			hostname, key.Type(), ssh.FingerprintSHA256(key), where, strings.TrimPrefix(key.Type(), "ssh-"), fix)
	case errors.As(err, &ke):
		h.err = fmt.Errorf("the ssh host key of %s changed (%s %s, not the one in %s:%d): someone may be in between, or the host was reinstalled. Only if you know it was, replace the old key: ssh-keygen -R %s && %s",
			hostname, key.Type(), ssh.FingerprintSHA256(key), ke.Want[0].Filename, ke.Want[0].Line, shellQuote(knownhosts.Normalize(hostname)), h.keyscan())
	case errors.As(err, &re):
		h.err = fmt.Errorf("the ssh host key of %s is revoked in %s:%d: %w", hostname, re.Revoked.Filename, re.Revoked.Line, err)
	default:
		h.err = fmt.Errorf("checking the ssh host key of %s: %w", hostname, err)
	}
	return h.err
}

// keySet is what labctl offers to sshd: the agent's keys, then the file's.
type keySet struct {
	signers []ssh.Signer
	agent   int    // how many came from ssh-agent
	file    string // the key file used, if any

	agentConn net.Conn
}

func (k keySet) close() {
	if k.agentConn != nil {
		_ = k.agentConn.Close()
	}
}

func (k keySet) describe() string {
	var parts []string
	if k.agent > 0 {
		parts = append(parts, fmt.Sprintf("%d key(s) from ssh-agent", k.agent))
	}
	if k.file != "" {
		parts = append(parts, "the key "+k.file)
	}
	return strings.Join(parts, " and ")
}

// sshKeys collects the keys in ssh-agent (SSH_AUTH_SOCK) and the private
// key in keyFile; with no keyFile, ssh's default identity files that
// exist. A passphrase-protected file is used through the agent only.
func sshKeys(keyFile string) (keySet, error) {
	var ks keySet
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		// The agent's signers call back into it during the handshake;
		// dialSSH closes the connection after it.
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return ks, fmt.Errorf("ssh-agent at SSH_AUTH_SOCK=%s: %w; start it (eval $(ssh-agent); ssh-add) or unset SSH_AUTH_SOCK", sock, err)
		}
		signers, err := agent.NewClient(conn).Signers()
		if err != nil {
			_ = conn.Close()
			return ks, fmt.Errorf("asking ssh-agent for its keys: %w", err)
		}
		ks.signers, ks.agent, ks.agentConn = signers, len(signers), conn
	}
	named := keyFile != ""
	keyFiles := []string{keyFile}
	if !named {
		home, _ := userhome.Dir()
		keyFiles = nil
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			keyFiles = append(keyFiles, filepath.Join(home, ".ssh", n))
		}
	}
	for _, f := range keyFiles {
		path, err := files.ExpandHome(f)
		if err != nil {
			return ks, err
		}
		signer, err := sshkey.ReadPrivate(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !named:
			continue
		case errors.Is(err, sshkey.ErrPassphrase):
			if ks.agent == 0 {
				return ks, fmt.Errorf("the ssh key %s is passphrase-protected and no ssh-agent holds keys: load it into the agent (eval $(ssh-agent); ssh-add %s); labctl never asks for passphrases", path, path)
			}
			continue // the agent may hold it
		case err != nil:
			return ks, err
		}
		ks.signers = append(ks.signers, signer)
		ks.file = path
		break
	}
	if len(ks.signers) == 0 {
		return ks, errors.New("no ssh key to log in with: load one into ssh-agent (ssh-add, with SSH_AUTH_SOCK set), or name a private key in lab.yaml (hypervisors[].libvirt.sshKeyFile)")
	}
	return ks, nil
}
