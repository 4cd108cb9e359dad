// Package sshkey reads the user's SSH keys: the private keys of every SSH
// login labctl makes (the management VM, qemu+ssh:// hosts), and the public
// keys lab.yaml puts on the VMs. Each rule is here once.
package sshkey

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/labctl/labctl/internal/files"
)

// ErrPassphrase marks a key file that needs a passphrase: labctl never
// asks for one, so such a key is usable only through ssh-agent.
var ErrPassphrase = errors.New("the key has a passphrase")

// ReadPrivate reads an unencrypted private key file, refusing one that
// others may read, as ssh does. A missing file wraps fs.ErrNotExist, a
// passphrase-protected one ErrPassphrase. The key is never printed.
func ReadPrivate(file string) (ssh.Signer, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("reading the ssh key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o); chmod 600 it, as ssh requires", file, st.Mode().Perm())
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the ssh key: %w", err)
	}
	s, err := ssh.ParsePrivateKey(data)
	var pm *ssh.PassphraseMissingError
	if errors.As(err, &pm) {
		return nil, fmt.Errorf("%s: %w; add it to ssh-agent with 'ssh-add %s'", file, ErrPassphrase, file)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: not a private key labctl can read: %v", file, err)
	}
	return s, nil
}

// CheckPublic is the rule for one public key as lab.yaml gives it and
// cloud-init's ssh_authorized_keys takes it: one line of the form
// "<type> <base64 key> [comment]", and never a private key.
func CheckPublic(line string) error {
	switch {
	case strings.Contains(line, "PRIVATE KEY"):
		return errors.New("is not an SSH public key but a private key, which never leaves your machine; give the public key (the line of the .pub file) instead")
	case !strings.HasPrefix(line, "ssh-") && !strings.HasPrefix(line, "ecdsa-") && !strings.HasPrefix(line, "sk-"):
		return errors.New("is not an SSH public key (want a line like 'ssh-ed25519 AAAA... you@host')")
	case strings.ContainsAny(line, "\r\n"):
		return errors.New("holds a line break; write each key on one line as its own list entry (a YAML | block adds a newline at its end: use a plain or quoted string)")
	case len(strings.Fields(line)) < 2:
		return fmt.Errorf("%q has no key after its type; paste the whole line of the .pub file", line)
	}
	return nil
}

// maxPublicFile bounds a public key file: one holds a few lines, and a
// wrong path (a disk image, /dev/zero) must not be read whole.
const maxPublicFile = 64 << 10

// Authorized is the public keys lab.yaml authorizes on the VMs it makes:
// management.sshPublicKeys, then the keys in management.sshPublicKeyFile
// (~ allowed; blank lines and # comments skipped). It refuses an empty
// list, a private key and any line that is not a public key, naming the
// field, the file and the fix. It is the one reader of those fields.
func Authorized(inline []string, file string) ([]string, error) {
	keys := make([]string, 0, len(inline)+1)
	for i, k := range inline {
		if err := CheckPublic(k); err != nil {
			return nil, fmt.Errorf("management.sshPublicKeys[%d] %w", i, err)
		}
		keys = append(keys, k)
	}
	if file != "" {
		fromFile, err := readPublic(file)
		if err != nil {
			return nil, fmt.Errorf("management.sshPublicKeyFile: %w", err)
		}
		keys = append(keys, fromFile...)
	}
	if len(keys) == 0 {
		return nil, errors.New("management: no SSH public key, so nobody could log in to the VMs; set sshPublicKeyFile (e.g. ~/.ssh/id_ed25519.pub, made with 'ssh-keygen -t ed25519') or sshPublicKeys")
	}
	return keys, nil
}

func readPublic(name string) ([]string, error) {
	path, err := files.ExpandHome(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist; make a key with 'ssh-keygen -t ed25519' or set management.sshPublicKeys", path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a folder; name the .pub file in it, e.g. %s/id_ed25519.pub", path, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPublicFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxPublicFile {
		return nil, fmt.Errorf("%s is larger than %d KiB, so it is no public key file; name the .pub file", path, maxPublicFile>>10)
	}
	if strings.Contains(string(data), "PRIVATE KEY") {
		// Said without the line: it would be the key itself.
		return nil, fmt.Errorf("%s holds a private key; name the .pub file beside it", path)
	}
	var keys []string
	for n, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := CheckPublic(line); err != nil {
			return nil, fmt.Errorf("%s line %d %w", path, n+1, err)
		}
		keys = append(keys, line)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no public key; name the .pub file of your key, or set management.sshPublicKeys", path)
	}
	return keys, nil
}
