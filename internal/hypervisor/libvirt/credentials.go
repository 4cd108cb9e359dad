package libvirt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/userhome"
)

// CredentialFiles are the files a connection to a host authenticates
// with, found as Dial finds them, for handing them on to labctl's libvirt
// provider (which runs elsewhere, with no ssh-agent and no home folder).
type CredentialFiles struct {
	// Transport is ssh or tls.
	Transport string
	// SSHKey is the private key: the one named, the URI's keyfile=, or the
	// first of ssh's default names that exists.
	SSHKey string
	// KnownHosts are the host keys to trust: the file named, else ssh's
	// own files that exist.
	KnownHosts []string
	TLS        TLSFiles
}

// FindCredentialFiles finds the credential files for uri (qemu+ssh or
// qemu+tls). sshKeyFile, knownHostsFile and set are lab.yaml's; empty
// means libvirt's and ssh's own choices, as for Dial.
func FindCredentialFiles(uri, sshKeyFile, knownHostsFile string, set TLSFiles) (CredentialFiles, error) {
	t, err := parseURI(uri)
	if err != nil {
		return CredentialFiles{}, err
	}
	out := CredentialFiles{Transport: t.transport}
	switch t.transport {
	case "tls":
		out.TLS, err = tlsFiles(t, set)
		return out, err
	case "ssh":
	default:
		return out, fmt.Errorf("uri %q: a libvirt provider reaches hosts over qemu+ssh:// or qemu+tls:// only", uri)
	}
	key := sshKeyFile
	if key == "" {
		key = t.keyFile
	}
	if key == "" {
		home, err := userhome.Dir()
		if err != nil {
			return out, fmt.Errorf("finding the ssh key: %w", err)
		}
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			if p := filepath.Join(home, ".ssh", n); fileExists(p) {
				key = p
				break
			}
		}
		if key == "" {
			return out, errors.New("no ssh key: none of ~/.ssh/id_ed25519, id_ecdsa, id_rsa exists; name the host's key in sshKeyFile")
		}
	}
	if out.SSHKey, err = files.ExpandHome(key); err != nil {
		return out, err
	}
	if knownHostsFile != "" {
		p, err := files.ExpandHome(knownHostsFile)
		if err != nil {
			return out, err
		}
		out.KnownHosts = []string{p}
		return out, nil
	}
	for _, f := range knownHostsFiles() {
		if _, err := os.Stat(f); err == nil {
			out.KnownHosts = append(out.KnownHosts, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("reading %s: %w", f, err)
		}
	}
	if len(out.KnownHosts) == 0 {
		return out, fmt.Errorf("no known_hosts file: the host's key must be known; run %s, or name a file in knownHostsFile", (&hostKeys{host: t.host, port: t.port}).keyscan())
	}
	return out, nil
}
