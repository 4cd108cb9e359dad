package files

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWritePrivateIs0600AndReplacesAWiderFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "labctl", "home")
	path := filepath.Join(dir, "mgmt.kubeconfig")
	if err := WritePrivate(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	// An older file left 0644 (by hand or an older labctl) must not keep its mode.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivate(path, []byte("second")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", st.Mode().Perm())
	}
	if got, _ := os.ReadFile(path); string(got) != "second" {
		t.Errorf("content %q", got)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("folder mode %04o, want 0700", st.Mode().Perm())
	}
	// No temporary file is left beside it.
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want only the file", len(ents))
	}
}

func TestWritePrivateIntoAFileFails(t *testing.T) {
	f := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivate(filepath.Join(f, "x"), []byte("s")); err == nil {
		t.Fatal("writing under a file succeeded")
	}
}

func TestStateDirFollowsXDG(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", "/xdg")
	if got, _ := StateDir("home"); got != "/xdg/labctl/home" {
		t.Errorf("absolute XDG_CONFIG_HOME: %s", got)
	}
	t.Setenv("XDG_CONFIG_HOME", "relative") // the spec says to ignore it
	if got, _ := StateDir("home"); got != filepath.Join(home, ".config", "labctl", "home") {
		t.Errorf("relative XDG_CONFIG_HOME: %s", got)
	}
	if got, _ := StatePath("home", "images", "x.log"); got != filepath.Join(home, ".config", "labctl", "home", "images", "x.log") {
		t.Errorf("StatePath: %s", got)
	}
	if _, err := StateDir(""); err == nil {
		t.Error("a lab without a name has a state folder")
	}
}

func TestExpandHome(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	for in, want := range map[string]string{"~/.ssh/id.pub": "/home/u/.ssh/id.pub", "~": "/home/u", "/abs": "/abs", "~other/x": "~other/x"} {
		if got, err := ExpandHome(in); err != nil || got != want {
			t.Errorf("ExpandHome(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
