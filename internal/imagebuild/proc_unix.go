//go:build unix

package imagebuild

import (
	"os/exec"
	"syscall"
)

// ownGroup starts the child in its own process group, and cancelling sends
// SIGINT to that whole group (make, packer and its plugins), as Ctrl-C in a
// terminal would, so Packer can remove its half-built VM.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
}

// killGroup ends what is left of the child's group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
