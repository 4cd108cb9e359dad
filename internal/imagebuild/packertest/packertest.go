// Package packertest puts a stand-in for image-builder's Proxmox target and
// Packer on disk, for tests: no Packer Proxmox plugin can be had here. The
// stand-in prints real -machine-readable lines.
package packertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Packer is a stand-in for packer 1.9.5 with the Proxmox plugin,
// which cannot be had here. It prints real -machine-readable lines. Its
// mode comes from STANDIN_MODE: ok (artifact 105), fail, or hang (until
// SIGINT). It leaks $PROXMOX_TOKEN into a ui line, as Packer's
// machine-readable mode may, so labctl's scrubbing is tested.
const Packer = `#!/bin/sh
# stand-in packer for labctl's tests
# out prints one line as is (dash's echo would expand Packer's literal \n).
out() { printf '%s\n' "$*"; }
if [ "$1" = version ]; then out "Packer v1.9.5"; exit 0; fi
echo $$ > "$STANDIN_PID_FILE"
t=1732950000
for a in "$@"; do case "$a" in -var-file=*) cp "${a#-var-file=}" "$STANDIN_VARS_COPY";; esac; done
out "$t,,ui,say,==> proxmox-iso.ubuntu-2404: Creating VM"
out "$t,proxmox-iso.ubuntu-2404,ui,message,    proxmox-iso.ubuntu-2404: token $PROXMOX_TOKEN for $PROXMOX_USERNAME at $PROXMOX_URL"
out "make-style plain line"
case "$STANDIN_MODE" in
ok)
  out "$t,,ui,say,Build 'proxmox-iso.ubuntu-2404' finished after 21 minutes 3 seconds."
  out "$t,,ui,say,\\n==> Builds finished. The artifacts of successful builds are:"
  out "$t,proxmox-iso.ubuntu-2404,artifact-count,1"
  out "$t,proxmox-iso.ubuntu-2404,artifact,0,builder-id,proxmox.iso"
  out "$t,proxmox-iso.ubuntu-2404,artifact,0,id,105"
  out "$t,proxmox-iso.ubuntu-2404,artifact,0,string,A template was created: 105"
  out "$t,proxmox-iso.ubuntu-2404,artifact,0,end"
  exit 0;;
fail)
  out "$t,,ui,error,Build 'proxmox-iso.ubuntu-2404' errored after 3 seconds: error creating VM: 500 storage 'local-lvm' does not exist"
  out "$t,,ui,error,\\n==> Some builds didn't complete successfully and had errors:"
  out "$t,,ui,error,--> proxmox-iso.ubuntu-2404: error creating VM: 500 storage 'local-lvm' does not exist%!(PACKER_COMMA) token $PROXMOX_TOKEN"
  out "$t,,ui,say,\\n==> Builds finished but no artifacts were created."
  exit 1;;
hang)
  trap 'out "$t,,ui,error,Build cancelled"; exit 130' INT TERM
  out "$t,,ui,say,==> proxmox-iso.ubuntu-2404: Waiting for SSH to become available..."
  while :; do /bin/sleep 0.1; done;;
esac
`

// Makefile is image-builder's build-proxmox-ubuntu-2404 target cut
// down to what labctl relies on: PACKER_VAR_FILES become -var-file flags.
const Makefile = "build-proxmox-ubuntu-2404:\n\tpacker build -machine-readable $(foreach f,$(PACKER_VAR_FILES),-var-file=$(f)) packer/proxmox/packer.json.tmpl\n"

// Standin is a stand-in image-builder checkout and a bin folder holding the
// stand-in packer, python3 and ansible-playbook, and a link to the real make.
type Standin struct {
	Builder  string // the checkout's root (pass as --image-builder)
	Bin      string // put first on the child's PATH
	PIDFile  string // the stand-in packer writes its pid here
	VarsCopy string // and copies the -var-file it was given here
}

// New sets up a Standin in a temporary folder. It skips the test when make
// is not installed.
func New(t testing.TB) *Standin {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("skipping: make is not installed: " + err.Error())
	}
	tmp := t.TempDir()
	s := &Standin{Builder: filepath.Join(tmp, "image-builder"), Bin: filepath.Join(tmp, "bin"),
		PIDFile: filepath.Join(tmp, "packer.pid"), VarsCopy: filepath.Join(tmp, "vars.copy.json")}
	capi := filepath.Join(s.Builder, "images", "capi")
	write := func(p, data string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(capi, "packer", "proxmox", "packer.json.tmpl"), "{}\n", 0o644)
	write(filepath.Join(capi, "Makefile"), Makefile, 0o644)
	write(filepath.Join(s.Bin, "packer"), Packer, 0o755)
	for _, tool := range []string{"python3", "ansible-playbook"} {
		write(filepath.Join(s.Bin, tool), "#!/bin/sh\n# stand-in\nexit 0\n", 0o755)
	}
	if err := os.Symlink(mk, filepath.Join(s.Bin, "make")); err != nil {
		t.Fatal(err)
	}
	return s
}

// Env is the environment the stand-in needs, for mode ok, fail or hang.
func (s *Standin) Env(mode string) []string {
	return []string{"STANDIN_MODE=" + mode, "STANDIN_PID_FILE=" + s.PIDFile, "STANDIN_VARS_COPY=" + s.VarsCopy}
}

// Path is a PATH with the stand-ins first, then the system folders.
func (s *Standin) Path() string { return s.Bin + ":/usr/bin:/bin" }
