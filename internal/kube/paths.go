package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/labctl/labctl/internal/userhome"
)

// MgmtKubeconfigFile is the name of the stored management-cluster
// kubeconfig inside a lab's state folder.
const MgmtKubeconfigFile = "mgmt.kubeconfig"

// StateDir is the folder where labctl keeps what it learns about one lab:
// $XDG_CONFIG_HOME/labctl/<lab>, with XDG_CONFIG_HOME defaulting to
// ~/.config (on every OS, so the path is the one the docs name).
func StateDir(lab string) (string, error) {
	if lab == "" {
		return "", errors.New("locating the lab's state folder: the lab has no name (metadata.name)")
	}
	base := os.Getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(base) { // the XDG spec says to ignore relative values
		// Under sudo, the invoking user's home: their next command,
		// without sudo, looks there.
		home, err := userhome.Dir()
		if err != nil {
			return "", fmt.Errorf("locating the lab's state folder: XDG_CONFIG_HOME is not set, and %w", err)
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "labctl", lab), nil
}

// MgmtKubeconfigPath is where labctl stores the management cluster's
// kubeconfig for lab: $XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig.
func MgmtKubeconfigPath(lab string) (string, error) {
	dir, err := StateDir(lab)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, MgmtKubeconfigFile), nil
}

// WritePrivate writes a secret file with mode 0600 (and its folder 0700),
// through a temporary file so a reader never sees half of it. Under sudo,
// what it makes inside the invoking user's home is theirs (userhome).
func WritePrivate(path string, data []byte) error {
	if err := userhome.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kubeconfig-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// The temporary file sits beside path, so it is in the invoking
	// user's home exactly when path is.
	if err := userhome.Own(tmp.Name()); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
