package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		home, err := os.UserHomeDir()
		if err != nil {
			return "", errors.New("locating the lab's state folder: neither XDG_CONFIG_HOME nor HOME is set")
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
// through a temporary file so a reader never sees half of it.
func WritePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
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
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
