package cluster

import (
	"errors"
	"fmt"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/sshkey"
)

// maxCredentialFile bounds one credentials file: keys, certificates and
// known_hosts are kilobytes; a wrong path (a disk image) is not read whole.
const maxCredentialFile = 1 << 20

// credentials fills each libvirt host's credentials Secret with the files
// lab.yaml names for its hypervisor (or libvirt's and ssh's own choices),
// for labctl's libvirt provider in the management cluster, which has no
// ssh-agent and no home folder. A private key must be unencrypted and
// readable by its owner only (0600), as ssh requires; errors name the
// lab.yaml field and the fix, never a file's content.
func credentials(lab *config.Lab, secrets []*corev1.Secret) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, s := range secrets {
		hv := s.Annotations[clusterapi.AnnotationCredentialsOf]
		h, err := lab.Hypervisor(hv)
		if err != nil || h.Libvirt == nil {
			return nil, fmt.Errorf("secret %s: %s is not a libvirt hypervisor of the lab", s.Name, hv)
		}
		data, err := hostCredentials(h)
		if err != nil {
			return nil, err
		}
		s = s.DeepCopy()
		s.Data = data
		obj, err := secretObject(s)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}

// secretObject is s as an object to apply.
func secretObject(s *corev1.Secret) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", s.Name, err)
	}
	obj := &unstructured.Unstructured{Object: u}
	unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
	return obj, nil
}

// hostCredentials reads the keys of one host's Secret.
func hostCredentials(h *config.Hypervisor) (map[string][]byte, error) {
	lv := h.Libvirt
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
			{controller.KeyCA, f.TLS.CAFile, "tls.caFile"}, {controller.KeyTLSCert, f.TLS.CertFile, "tls.certFile"}, {controller.KeyTLSKey, f.TLS.KeyFile, "tls.keyFile"},
		} {
			b, err := readCredential(k.path, k.key == controller.KeyTLSKey)
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
	return map[string][]byte{controller.KeySSHPrivateKey: key, controller.KeyKnownHosts: known}, nil
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
