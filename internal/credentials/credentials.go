// Package credentials reads what lab.yaml names outside itself for a
// cluster's objects: the owner's SSH public keys every node gets, and a
// libvirt host's key or TLS client certificate for the provider. The
// render takes it as its clusterapi.Credentials, as clusterctl resolves a
// template's variables through an injected client; tests hand in their own.
package credentials

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/sshkey"
)

// maxCredentialFile bounds one credentials file: keys, certificates and
// known_hosts are kilobytes; a wrong path (a disk image) is not read whole.
const maxCredentialFile = 1 << 20

// Files reads the files the lab names, on this machine. Its one meaning is
// to read: a dry run reads too, so a missing key stops it as it would stop
// the real run.
type Files struct {
	Lab *config.Lab
}

// SSHKeys are the owner's public keys (management.sshPublicKeys and
// sshPublicKeyFile, sshkey.Authorized's rule), put on every node.
func (f Files) SSHKeys() ([]string, error) {
	return sshkey.Authorized(f.Lab.Management.SSHPublicKeys, f.Lab.Management.SSHPublicKeyFile)
}

// Withheld reads the public keys as Files does and gives no host's
// credentials: for printing the objects ('cluster create --dry-run -o
// yaml'), which never shows them, so a machine without the hosts' files
// can still print what create would apply.
type Withheld struct{ Files }

// Host gives no data: the Secret is printed with its hypervisor only.
func (Withheld) Host(*config.Hypervisor) (map[string][]byte, error) { return nil, nil }

// Host reads libvirt host h's credentials Secret data from the files
// lab.yaml names for it (or libvirt's and ssh's own choices), for labctl's
// libvirt provider in the management cluster, which has no ssh-agent and
// no home folder. A private key must be unencrypted and readable by its
// owner only (0600), as ssh requires; errors name the lab.yaml field and
// the fix, never a file's content.
func (Files) Host(h *config.Hypervisor) (map[string][]byte, error) {
	lv := h.Libvirt
	if lv == nil {
		return nil, fmt.Errorf("%s is not a libvirt hypervisor", h.Name)
	}
	field := fmt.Sprintf("hypervisors[%s].libvirt", h.Name)
	var set libvirt.TLSFiles
	if lv.TLS != nil {
		set = libvirt.TLSFiles{CAFile: lv.TLS.CAFile, CertFile: lv.TLS.CertFile, KeyFile: lv.TLS.KeyFile}
	}
	f, err := libvirt.FindCredentialFiles(lv.URI, lv.SSHKeyFile, lv.KnownHostsFile, set)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if f.Transport == "tls" {
		data := map[string][]byte{}
		for _, k := range []struct{ key, path, name string }{
			{v1alpha1.KeyCA, f.TLS.CAFile, "tls.caFile"}, {v1alpha1.KeyTLSCert, f.TLS.CertFile, "tls.certFile"}, {v1alpha1.KeyTLSKey, f.TLS.KeyFile, "tls.keyFile"},
		} {
			b, err := readCredential(k.path, k.key == v1alpha1.KeyTLSKey)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", field, k.name, err)
			}
			data[k.key] = b
		}
		return data, nil
	}
	// The provider cannot ask for a passphrase, nor use an agent.
	if _, err := sshkey.ReadPrivate(f.SSHKey); errors.Is(err, sshkey.ErrPassphrase) {
		return nil, fmt.Errorf("%s.sshKeyFile: %s has a passphrase, and labctl's libvirt provider in the management cluster cannot enter one; make it a key of its own without one (ssh-keygen -t ed25519 -N '' -f ~/.ssh/id_labctl_provider) and authorize it on the host", field, f.SSHKey)
	} else if err != nil {
		return nil, fmt.Errorf("%s.sshKeyFile: %w", field, err)
	}
	key, err := readCredential(f.SSHKey, true)
	if err != nil {
		return nil, fmt.Errorf("%s.sshKeyFile: %w", field, err)
	}
	var known []byte
	for _, p := range f.KnownHosts {
		b, err := readCredential(p, false)
		if err != nil {
			return nil, fmt.Errorf("%s.knownHostsFile: %w", field, err)
		}
		known = append(known, b...)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			known = append(known, '\n')
		}
	}
	return map[string][]byte{v1alpha1.KeySSHPrivateKey: key, v1alpha1.KeyKnownHosts: known}, nil
}

// readCredential reads one file; private is a key, which only its owner
// may read.
func readCredential(path string, private bool) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read: %w", path, errors.Unwrap(err))
	}
	switch {
	case st.IsDir():
		return nil, fmt.Errorf("%s is a folder; name the file", path)
	case st.Size() > maxCredentialFile:
		return nil, fmt.Errorf("%s is larger than %d KiB, so it is no key, certificate or known_hosts; name the right file", path, maxCredentialFile>>10)
	case private && st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%s is readable by others (mode %04o); chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be read: %w", path, errors.Unwrap(err))
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return slices.Clip(b), nil
}
