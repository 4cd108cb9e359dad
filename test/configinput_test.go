package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// hostileStart starts labctl with args and stdin, in a private HOME, and
// returns the running child and its combined output.
func hostileStart(t *testing.T, stdin *os.File, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(labctl(t), args...)
	cmd.Dir = home
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "NO_COLOR=1"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out
}

// exitOf waits for cmd at most limit and returns its exit code.
func exitOf(t *testing.T, cmd *exec.Cmd, limit time.Duration, out *bytes.Buffer) (int, time.Duration) {
	t.Helper()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("waiting for labctl: %v", err)
		}
		if exit != nil && exit.ExitCode() < 0 {
			t.Fatalf("labctl was killed by %v instead of exiting\n%s", exit, out)
		}
		return cmd.ProcessState.ExitCode(), time.Since(began)
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("labctl %s did not exit within %s\n%s", strings.Join(cmd.Args[1:], " "), limit, out)
	}
	return 0, 0
}

// commandsThatLoad are labctl commands whose first act is reading the
// config; each must stay deaf to nothing while it reads.
var commandsThatLoad = [][]string{
	{"config", "validate"},
	{"config", "view"},
	{"doctor"},
	{"mgmt", "up", "--dry-run"},
	{"mgmt", "status"},
	{"image", "build", "--dry-run"},
	{"cluster", "list"},
	{"scale-test", "lab1"},
}

// TestConfigFromSilentFIFOEndsOnSignal: '-c FIFO' with no writer blocked
// in open(2), where Ctrl-C and SIGTERM were swallowed until SIGKILL. Each
// command must now exit within 1 s of either, 130 for SIGINT and 143 for
// SIGTERM, and say it was interrupted.
func TestConfigFromSilentFIFOEndsOnSignal(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "lab.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range commandsThatLoad {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
			t.Run(fmt.Sprintf("%s/%s", strings.Join(args, "-"), sig), func(t *testing.T) {
				cmd, out := hostileStart(t, nil, append(args, "-c", fifo)...)
				interruptWithin(t, cmd, out, sig, time.Second)
			})
		}
	}
}

// TestConfigFromOpenStdinEndsOnSignal: '-c -' on a stdin that never
// closes, here holding a whole 1.8 MB config still waiting for its end.
func TestConfigFromOpenStdinEndsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		for _, args := range [][]string{{"config", "validate"}, {"config", "view"}, {"cluster", "list"}} {
			t.Run(fmt.Sprintf("%s/%s", strings.Join(args, "-"), sig), func(t *testing.T) {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				cmd, out := hostileStart(t, r, append(args, "-c", "-")...)
				r.Close()
				if _, err := w.Write(bigDNSList(100000)); err != nil {
					t.Fatal(err)
				}
				interruptWithin(t, cmd, out, sig, time.Second)
			})
		}
	}
}

// interruptWithin lets cmd run for settle (past start-up, into the wait
// under test), sends sig, and checks that it ends within 1 s with 128+sig
// and says so.
func interruptWithin(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer, sig syscall.Signal, settle time.Duration) {
	t.Helper()
	time.Sleep(settle)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	code, took := exitOf(t, cmd, 1*time.Second, out)
	if want := 128 + int(sig); code != want {
		t.Errorf("exit code %d after %s, want %d\n%s", code, sig, want, out)
	}
	if !strings.Contains(out.String(), "interrupted") {
		t.Errorf("labctl did not say it was interrupted:\n%s", out)
	}
	t.Logf("exit %d %s after %s", code, took.Round(time.Millisecond), sig)
}

// TestConfigFromDevZeroIsBounded: '-c /dev/zero' read until memory ran out
// and died with a Go stack trace. It must stop at the bound and exit 1
// with an error naming the file and the bound.
func TestConfigFromDevZeroIsBounded(t *testing.T) {
	for _, args := range [][]string{{"config", "validate"}, {"config", "view"}, {"doctor"}} {
		t.Run(strings.Join(args, "-"), func(t *testing.T) {
			cmd, out := hostileStart(t, nil, append(args, "-c", "/dev/zero")...)
			code, _ := exitOf(t, cmd, 20*time.Second, out)
			if code != 1 {
				t.Errorf("exit code %d, want 1\n%s", code, out)
			}
			for _, want := range []string{"/dev/zero", "larger than 4 MiB"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output does not say %q:\n%s", want, out)
				}
			}
			if strings.Contains(out.String(), "goroutine ") {
				t.Errorf("labctl printed a stack trace:\n%s", out)
			}
		})
	}
}

// TestConfigBigDNSListIsRefused: a 1.8 MB config listing 100,000 DNS
// servers took 24 s to validate. It must be refused at once (exit 1) with
// one error naming the file, the line and the field.
func TestConfigBigDNSListIsRefused(t *testing.T) {
	data := bigDNSList(100000)
	if len(data) < 1_800_000 {
		t.Fatalf("the list is only %d bytes", len(data))
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	line := bytes.Count(data[:bytes.Index(data, []byte("  - 172."))], []byte("\n")) + 1
	for _, args := range [][]string{{"config", "validate"}, {"config", "view"}} {
		t.Run(strings.Join(args, "-"), func(t *testing.T) {
			cmd, out := hostileStart(t, nil, append(args, "-c", path)...)
			code, _ := exitOf(t, cmd, 20*time.Second, out)
			if code != 1 {
				t.Errorf("exit code %d, want 1\n%.2000s", code, out)
			}
			if want := fmt.Sprintf("%s:%d: network.dns: lists 100000 DNS servers", path, line); !strings.Contains(out.String(), want) {
				t.Errorf("output does not contain %q:\n%.2000s", want, out)
			}
			if out.Len() > 2000 {
				t.Errorf("the report is %d bytes; one error for the list is enough", out.Len())
			}
		})
	}
}

// bigDNSList is a valid lab but for its n distinct DNS servers, about 19
// bytes a line.
func bigDNSList(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`apiVersion: labctl.dev/v1alpha1
kind: Lab
metadata: {name: big}
hypervisors:
  - name: local
    libvirt: {uri: "qemu:///system", network: labctl}
management:
  ip: 172.16.0.10
  sshPublicKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBig big@lab"]
network:
  cidr: 172.16.0.0/12
  gateway: 172.16.0.1
  dns:
`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - 172.%d.%d.%d\n", 17+i>>16, i>>8&255, i&255)
	}
	return b.Bytes()
}

// TestSecretInURLIsRefusedUnprinted: the lab, with the token id
// and secret written into the Proxmox URL, validated, and config view,
// doctor and mgmt install --dry-run then printed the secret. Every
// command must now refuse the config, naming the field and the fix, and
// print the secret nowhere.
func TestSecretInURLIsRefusedUnprinted(t *testing.T) {
	const urlSecret = "9c8b7a65-url-secret"
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lab, err := os.ReadFile(filepath.Join(root, "examples", "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	withSecret := bytes.Replace(lab, []byte("url: https://192.168.0.8:8006"), []byte("url: https://user%40pam%21labctl:"+urlSecret+"@192.168.0.8:8006"), 1)
	if bytes.Equal(withSecret, lab) {
		t.Fatal("examples/lab.yaml has no url: https://192.168.0.8:8006 to replace")
	}
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, withSecret, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"config", "validate"}, {"config", "view"}, {"config", "view", "-o", "json"}, {"doctor"},
		{"mgmt", "install", "--dry-run"}, {"mgmt", "install", "--dry-run", "-o", "yaml"}, {"mgmt", "up", "--dry-run"},
		{"cluster", "create", "lab1", "--dry-run", "-o", "yaml"}, {"image", "build", "--dry-run"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runEnv(t, nil, append(args, "-c", path)...)
			out := r.stdout + r.stderr
			if r.code != 1 {
				t.Errorf("exit %d, want 1\n%s", r.code, out)
			}
			if strings.Contains(out, urlSecret) {
				t.Errorf("the secret in the URL was printed:\n%s", out)
			}
			if !strings.Contains(out, "hypervisors[0].proxmox.url") || !strings.Contains(out, "tokenSecret") {
				t.Errorf("the error does not name the field and the fix:\n%s", out)
			}
		})
	}
}
