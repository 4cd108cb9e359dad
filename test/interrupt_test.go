package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// Ctrl-C while labctl waits on a management cluster that never answers: the
// child must stop at once, say it was interrupted and exit non-zero.
func TestCtrlCInterruptsWait(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := hungAPI(t, dir)
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(labctl(t), "doctor", "-c", "examples/lab.yaml", "--kubeconfig", kubeconfig)
	cmd.Dir = root
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PVE_TOKEN_SECRET=" + secret, "NO_COLOR=1"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // let it reach the API call; doctor's own timeout is 15 s
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	took := time.Since(sent)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("labctl exited %v after Ctrl-C; want 130\n%s%s", err, out.String(), errb.String())
	}
	if took > 5*time.Second {
		t.Errorf("labctl took %s to stop after Ctrl-C", took)
	}
	if !strings.Contains(out.String()+errb.String(), "interrupted") {
		t.Errorf("labctl did not say it was interrupted:\nstdout: %s\nstderr: %s", out.String(), errb.String())
	}
	t.Logf("exit %d, %s after SIGINT\n%s%s", exit.ExitCode(), took.Round(time.Millisecond), out.String(), errb.String())
}

// hungAPI is a loopback listener that accepts TCP and then says nothing,
// not even its half of the TLS handshake: a hung API server. It returns a
// kubeconfig in dir that points at it.
func hungAPI(t *testing.T, dir string) string {
	t.Helper()
	hung := testbed.StartSilent(t)
	kubeconfig := filepath.Join(dir, "hung.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: hung
  cluster:
    server: https://`+hung.Addr+`
contexts:
- name: hung
  context: {cluster: hung, user: hung}
current-context: hung
users:
- name: hung
  user: {token: not-a-secret}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestSignalCutsTLSHandshake: every command that talks to a management
// cluster stops within a second of SIGINT or SIGTERM while its TLS
// handshake hangs, rather than after client-go's 10 s handshake timeout.
func TestSignalCutsTLSHandshake(t *testing.T) {
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := hungAPI(t, dir)
	// cluster create and scale-test render the cluster first, which needs
	// the user's public key.
	if err := os.MkdirAll(filepath.Join(dir, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHung test@labctl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mgmt", "status"},
		{"cluster", "list"},
		{"cluster", "create", "lab1"},
		{"scale-test", "lab1"},
	} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			t.Run(strings.Join(args[:2], " ")+"/"+sig.String(), func(t *testing.T) {
				cmd := exec.Command(labctl(t), append(args, "-c", "examples/lab.yaml", "--kubeconfig", kubeconfig)...)
				cmd.Dir = root
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PVE_TOKEN_SECRET=" + secret, "NO_COLOR=1"}
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				// Long enough to be inside the handshake (loading the
				// config and dialling take a few ms), well short of the
				// 10 s handshake timeout.
				interruptWithin(t, cmd, &out, sig, 1500*time.Millisecond)
			})
		}
	}
}
