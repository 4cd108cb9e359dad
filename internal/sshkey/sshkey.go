// Package sshkey reads the user's SSH private keys: the one rule for
// every SSH login labctl makes (the management VM, qemu+ssh:// hosts).
package sshkey

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/crypto/ssh"
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
