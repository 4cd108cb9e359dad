// Package userhome finds the home folder of the user labctl works for,
// and makes the files it writes there theirs.
//
// Under sudo that user is the one who typed 'sudo labctl ...', not root:
// 'sudo labctl mgmt up' (qemu:///system wants root) must read that user's
// SSH key and leave the kubeconfig where their next, unprivileged command
// looks for it, owned by them. sudo says who it was in SUDO_USER, SUDO_UID
// and SUDO_GID (sudo(8), "ENVIRONMENT"); whether it also set HOME depends
// on its configuration, so HOME is not trusted under sudo.
package userhome

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// lookup reads the password database; tests replace it (SetLookup),
// since the users a test fakes do not exist on the machine.
var lookup = user.Lookup

// SetLookup replaces the password database lookup until restore is
// called. It is for tests (see sudotest); labctl itself never calls it.
func SetLookup(f func(name string) (*user.User, error)) (restore func()) {
	old := lookup
	lookup = f
	return func() { lookup = old }
}

// Sudo is the user who ran labctl through sudo.
type Sudo struct {
	Name     string
	UID, GID int
	Home     string
}

// Invoker returns the user who ran 'sudo labctl', or nil when labctl runs
// as itself: not root, no SUDO_USER, or SUDO_USER root.
func Invoker() (*Sudo, error) {
	name := os.Getenv("SUDO_USER")
	if os.Geteuid() != 0 || name == "" || name == "root" {
		return nil, nil
	}
	uid, err1 := strconv.Atoi(os.Getenv("SUDO_UID"))
	gid, err2 := strconv.Atoi(os.Getenv("SUDO_GID"))
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("running under sudo for %s, but SUDO_UID/SUDO_GID (%q/%q) are not numbers; run labctl through sudo itself, or unset SUDO_USER", name, os.Getenv("SUDO_UID"), os.Getenv("SUDO_GID"))
	}
	u, err := lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running under sudo for %s: finding their home folder: %w", name, err)
	}
	if u.HomeDir == "" || !filepath.IsAbs(u.HomeDir) {
		return nil, fmt.Errorf("running under sudo for %s: the password database gives no home folder for them", name)
	}
	return &Sudo{Name: name, UID: uid, GID: gid, Home: u.HomeDir}, nil
}

// Dir is the home folder of the user labctl works for: $HOME, except
// under sudo when HOME is unset or root's own (sudo's always_set_home,
// Ubuntu's default): then the invoking user's. A HOME that names
// somewhere else was chosen on purpose (sudo -E, HOME=...) and is kept.
func Dir() (string, error) {
	s, err := Invoker()
	if err != nil {
		return "", err
	}
	if s != nil {
		if home := os.Getenv("HOME"); home == "" || filepath.Clean(home) == rootHome() {
			return s.Home, nil
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", errors.New("finding the home folder: HOME is not set")
	}
	return home, nil
}

func rootHome() string {
	if u, err := lookup("root"); err == nil && u.HomeDir != "" {
		return filepath.Clean(u.HomeDir)
	}
	return "/root"
}

// MkdirAll is os.MkdirAll, and under sudo the folders it creates inside
// the invoking user's home become theirs: a root-owned ~/.config would
// lock them out of their own settings.
func MkdirAll(dir string, perm os.FileMode) error {
	s, err := Invoker()
	if err != nil {
		return err
	}
	var created []string
	if s != nil {
		for d := filepath.Clean(dir); within(s.Home, d); d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil {
				break
			}
			created = append(created, d)
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range created {
		if err := os.Lchown(d, s.UID, s.GID); err != nil {
			return fmt.Errorf("giving %s to %s: %w", d, s.Name, err)
		}
	}
	return nil
}

// Own gives path to the invoking user when labctl runs under sudo and
// path is inside their home; elsewhere (or not under sudo) it does
// nothing. The mode is left as it is: a 0600 file stays 0600.
func Own(path string) error {
	s, err := Invoker()
	if err != nil || s == nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil || !within(s.Home, abs) {
		return err
	}
	if err := os.Lchown(abs, s.UID, s.GID); err != nil {
		return fmt.Errorf("giving %s to %s: %w", path, s.Name, err)
	}
	return nil
}

// within reports whether p is home or below it (and not home's parent).
func within(home, p string) bool {
	rel, err := filepath.Rel(home, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}
