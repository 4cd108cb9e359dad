// Package files holds the rules for the files labctl keeps on the user's
// machine: where a lab's state folder is, how ~ in a lab.yaml path is read,
// and how a private file (a kubeconfig, a host key) is written. It knows
// nothing of Kubernetes or of lab.yaml's types.
package files

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

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

// StatePath is a file or folder in lab's state folder, e.g.
// StatePath("home", "mgmt.kubeconfig").
func StatePath(lab string, elem ...string) (string, error) {
	dir, err := StateDir(lab)
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{dir}, elem...)...), nil
}

// ExpandHome replaces a leading ~/ with the user's home folder.
func ExpandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot expand %s: the home folder is unknown (HOME is not set)", path)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}

// WritePrivate writes a secret file with mode 0600 (and its folder 0700),
// through a temporary file in the same folder renamed over path, so a
// reader never sees half of it and the mode never widens, whatever the
// old file's mode or the umask.
func WritePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
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
