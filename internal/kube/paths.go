package kube

import (
	"errors"
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
