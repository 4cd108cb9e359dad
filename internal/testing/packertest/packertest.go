// Package packertest runs labctl's image builds through image-builder's
// real Makefile, with Packer and its Proxmox plugin stood in: neither can be
// had here. The Makefile, its hack/ scripts and the Packer templates are
// kubernetes-sigs/image-builder at the pinned tag, read from
// ../shared/upstream/image-builder-<tag>/images/capi beside the module root
// (CI has it; a fresh clone does not, and the tests then skip) and copied to
// a temporary folder, because hack/set-ssh-password.sh writes the rendered
// templates next to their .tmpl files.
//
// The stand-in packer (Main) is the test binary itself, run under the name
// packer: a test package that uses New must call Main from its TestMain
// when IsStandin reports true.
package packertest

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// Standin is a copy of image-builder's images/capi and a bin folder with the
// stand-in packer, ansible, ansible-galaxy and ansible-playbook; make,
// bash, python3 and openssl are the machine's, which the Makefile's
// deps-proxmox and set-ssh-password steps run.
type Standin struct {
	Builder  string // the checkout's root (pass as --image-builder)
	Bin      string // put first on the child's PATH
	PIDFile  string // the stand-in packer writes its pid here
	VarsCopy string // and copies the last -var-file it was given (labctl's) here
}

// IsStandin reports whether this process was started as one of the
// stand-in commands.
func IsStandin() bool {
	switch filepath.Base(os.Args[0]) {
	case "packer", "ansible", "ansible-galaxy", "ansible-playbook":
		return true
	}
	return false
}

// Upstream is image-builder's images/capi folder at the pinned tag: in
// .testbed/src, where `hack/testenv.sh all` (make test) puts it from the
// mirror in ../shared or a git clone, else in ../shared itself. It skips
// the test when neither has it.
func Upstream(t testing.TB) string {
	t.Helper()
	pins, err := versions.Get()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	name := "image-builder-" + pins.ImageBuilder
	dirs := []string{
		filepath.Join(root, ".testbed", "src", name, "images", "capi"),
		filepath.Join(filepath.Dir(root), "shared", "upstream", name, "images", "capi"),
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "Makefile")); err == nil {
			return dir
		}
	}
	t.Skipf("skipping: image-builder's Makefile is in neither %s: get it with 'hack/upstream-src.sh %s' (git and the network, or the mirror ../shared)", strings.Join(dirs, " nor "), name)
	return ""
}

// New sets up a Standin in a temporary folder. It skips the test when make
// or the upstream image-builder is missing.
func New(t testing.TB) *Standin {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("skipping: make is not installed: " + err.Error())
	}
	src := Upstream(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	s := &Standin{Builder: filepath.Join(tmp, "image-builder"), Bin: filepath.Join(tmp, "bin"),
		PIDFile: filepath.Join(tmp, "packer.pid"), VarsCopy: filepath.Join(tmp, "vars.copy.json")}
	if err := copyTree(src, filepath.Join(s.Builder, "images", "capi")); err != nil {
		t.Fatalf("copying image-builder from %s: %v", src, err)
	}
	if err := os.MkdirAll(s.Bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"packer", "ansible", "ansible-galaxy", "ansible-playbook"} {
		if err := os.Symlink(self, filepath.Join(s.Bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// copyTree copies regular files, folders and symlinks, keeping modes.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, info.Mode().Perm()|0o200)
	})
}

// Env is the environment the stand-in needs: mode ok, or hang (the build
// waits for SIGINT or SIGTERM once the VM runs).
func (s *Standin) Env(mode string) []string {
	return []string{"STANDIN_MODE=" + mode, "STANDIN_PID_FILE=" + s.PIDFile, "STANDIN_VARS_COPY=" + s.VarsCopy}
}

// Path is a PATH with the stand-ins first, then the system folders.
func (s *Standin) Path() string { return s.Bin + ":/usr/bin:/bin" }
