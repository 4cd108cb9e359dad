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

	"github.com/labctl/labctl/internal/userhome"
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

// IsState reports whether path is inside labctl's state folders
// ($XDG_CONFIG_HOME/labctl), also through a symlink: files labctl keeps
// for itself, which it must never change for another purpose.
func IsState(path string) bool {
	dir, err := StateDir("x")
	if err != nil {
		return false
	}
	base := filepath.Dir(dir)
	for _, b := range []string{abs(base), resolved(base)} {
		for _, p := range []string{abs(path), resolved(path)} {
			if rel, err := filepath.Rel(b, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				return true
			}
		}
	}
	return false
}

func abs(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// resolved is path made absolute with its symlinks followed, as far as
// they exist.
func resolved(path string) string {
	if r, err := filepath.EvalSymlinks(abs(path)); err == nil {
		return r
	}
	return abs(path)
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

// ExpandHome replaces a leading ~/ with the home folder of the user
// labctl works for: under sudo, the invoking user's (see userhome).
func ExpandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := userhome.Dir()
	if err != nil {
		return "", fmt.Errorf("cannot expand %s: %w", path, err)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}

// WritePrivate writes a secret file with mode 0600 (and its folder 0700),
// through a temporary file in the same folder renamed over path, so a
// reader never sees half of it and the mode never widens, whatever the
// old file's mode or the umask. Under sudo, what it makes inside the
// invoking user's home is theirs (userhome).
func WritePrivate(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := userhome.MkdirAll(dir, 0o700); err != nil {
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
