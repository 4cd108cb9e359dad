package userhome_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/labctl/labctl/internal/testing/sudotest"
	"github.com/labctl/labctl/internal/userhome"
)

func owner(t *testing.T, path string) (uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

func TestDirWithoutSudo(t *testing.T) {
	t.Setenv("SUDO_USER", "")
	t.Setenv("HOME", "/home/me")
	if d, err := userhome.Dir(); err != nil || d != "/home/me" {
		t.Errorf("Dir() = %q, %v; want $HOME", d, err)
	}
}

func TestSudo(t *testing.T) {
	home := t.TempDir()
	sudotest.Fake(t, "alice", 4242, 4343, home)
	if d, err := userhome.Dir(); err != nil || d != home {
		t.Fatalf("under sudo, Dir() = %q, %v; want alice's home %s", d, err, home)
	}
	// A HOME chosen on purpose (sudo -E, HOME=...) is kept.
	t.Setenv("HOME", "/elsewhere")
	if d, _ := userhome.Dir(); d != "/elsewhere" {
		t.Errorf("with HOME=/elsewhere under sudo, Dir() = %q", d)
	}
	t.Setenv("HOME", "/root")

	dir := filepath.Join(home, ".config", "labctl", "lab")
	if err := userhome.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(home, ".config"), filepath.Join(home, ".config", "labctl"), dir} {
		if uid, gid := owner(t, d); uid != 4242 || gid != 4343 {
			t.Errorf("%s is owned by %d:%d, want alice's 4242:4343", d, uid, gid)
		}
	}
	if uid, _ := owner(t, home); uid != 0 {
		t.Errorf("the home folder itself changed owner to %d", uid)
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := userhome.Own(f); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(f)
	if uid, _ := owner(t, f); uid != 4242 || fi.Mode().Perm() != 0o600 {
		t.Errorf("Own: uid %d mode %04o, want 4242 and 0600 kept", uid, fi.Mode().Perm())
	}
	// Outside the home nothing changes hands.
	out := filepath.Join(t.TempDir(), "a", "b")
	if err := userhome.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if uid, _ := owner(t, out); uid != 0 {
		t.Errorf("%s outside alice's home is owned by %d", out, uid)
	}
}

func TestSudoBadIDs(t *testing.T) {
	sudotest.Fake(t, "alice", 1, 1, t.TempDir())
	t.Setenv("SUDO_UID", "x")
	if _, err := userhome.Dir(); err == nil {
		t.Error("a SUDO_UID that is no number was accepted")
	}
}
