package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/testing/packertest"
	"github.com/labctl/labctl/internal/testing/pvetest"
)

// TestImageBuildCtrlC runs 'labctl image build' with the stand-in Packer
// hanging in the build, sends labctl SIGINT as a terminal's Ctrl-C would
// (only to labctl: the child runs in its own process group), and checks that
// labctl stops the child's group and exits 130 without printing the secret.
func TestImageBuildCtrlC(t *testing.T) {
	srv := pvetest.New(t)
	srv.Secret = secret
	st := packertest.New(t)
	data, err := os.ReadFile("../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lab := strings.NewReplacer("url: https://192.168.0.8:8006", "url: "+srv.URL,
		"caFile: ~/.config/labctl/pve-root-ca.pem", "fingerprint: "+proxmox.Fingerprint(srv.Certificate())).Replace(string(data))
	dir := t.TempDir()
	path := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(path, []byte(lab), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(labctl(t), "image", "build", "-vvv", "-c", path, "--image-builder", st.Builder)
	cmd.Env = append(st.Env("hang"), "PATH="+st.Path(), "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg"),
		"PVE_TOKEN_SECRET="+secret, "NO_COLOR=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in packer never started:\n%s", errb.String())
		}
		if b, err := os.ReadFile(st.PIDFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err != nil || bytes.Contains(cmdline, []byte(secret)) {
		t.Errorf("packer's argv: %q, %v", cmdline, err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("labctl did not exit after SIGINT")
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Errorf("exit: %v, want 130\n%s", err, errb.String())
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("stand-in packer %d still runs after labctl exited", pid)
	}
	if strings.Contains(out.String()+errb.String(), secret) {
		t.Errorf("secret printed:\n%s\n%s", out.String(), errb.String())
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "xdg", "labctl", "*", "images", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("build logs: %v", logs)
	}
	if b, _ := os.ReadFile(logs[0]); bytes.Contains(b, []byte(secret)) || !bytes.Contains(b, []byte("Cleanly cancelled builds after being interrupted.")) {
		t.Errorf("log %s: secret present or packer not interrupted:\n%s", logs[0], b)
	}
}
