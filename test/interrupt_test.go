package integration

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testbed"
)

// Ctrl-C while labctl waits on a management cluster that never answers: the
// child must stop at once, say it was interrupted and exit non-zero.
func TestCtrlCInterruptsWait(t *testing.T) {
	// A loopback listener that accepts and then says nothing: a hung API server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "hung.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: hung
  cluster:
    server: https://`+ln.Addr().String()+`
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
