package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

// Every mistake in how labctl is called exits 2, names the mistake and
// points to the --help of the command that was meant.
func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want, cmd string
	}{
		{[]string{"cluster", "delte"}, `unknown command "delte" for "labctl cluster"; did you mean delete?`, "labctl cluster"},
		{[]string{"bogus"}, `unknown command "bogus" for "labctl"`, "labctl"},
		{[]string{"mgmt", "upp"}, `unknown command "upp" for "labctl mgmt"; did you mean up?`, "labctl mgmt"},
		{[]string{"cluster", "delete"}, "accepts 1 arg(s), received 0", "labctl cluster delete"},
		{[]string{"cluster", "delete", "a", "b"}, "accepts 1 arg(s), received 2", "labctl cluster delete"},
		{[]string{"version", "extra"}, `unknown command "extra" for "labctl version"`, "labctl version"},
		{[]string{"image", "build", "a", "b"}, "accepts at most 1 arg(s), received 2", "labctl image build"},
		{[]string{"cluster", "list", "--bogus"}, "unknown flag: --bogus", "labctl cluster list"},
		{[]string{"mgmt", "up", "--yes"}, "unknown flag: --yes", "labctl mgmt up"},
		{[]string{"mgmt", "backup"}, "FILE is missing: 'labctl mgmt backup FILE' (or --dry-run", "labctl mgmt backup"},
		{[]string{"mgmt", "backup", "a", "b"}, "accepts at most 1 arg(s), received 2", "labctl mgmt backup"},
		{[]string{"mgmt", "restore"}, "accepts 1 arg(s), received 0", "labctl mgmt restore"},
		{[]string{"config", "init", "--local", "--proxmox", "https://pve1.lan:8006", "-c", "-"}, "--local and --proxmox cannot be used together; pass only one", "labctl config init"},
		{[]string{"mgmt", "kubeconfig", "--write", "x", "--merge"}, "--write and --merge cannot be used together; pass only one", "labctl mgmt kubeconfig"},
		{[]string{"config", "init", "--proxmox", "not a url", "-c", "-"}, `--proxmox "not a url": want the Proxmox VE API URL`, "labctl config init"},
		{[]string{"completion", "tcsh"}, `unknown shell "tcsh" for "labctl completion"; labctl completes bash, fish, powershell and zsh`, "labctl completion"},
		{[]string{"completion", "bash", "extra"}, `unknown command "extra" for "labctl completion bash"`, "labctl completion bash"},
		{[]string{"help", "nope"}, `unknown help topic "nope"`, "labctl help"},
		{[]string{"help", "cluster", "nope"}, `unknown help topic "cluster nope"`, "labctl help"},
		{[]string{"mgmt", "kubeconfig", "--ttl", "2h"}, "--ttl needs --read-only (or --revoke)", "labctl mgmt kubeconfig"},
		{[]string{"cluster", "kubeconfig", "lab1", "--read-only", "--ttl", "1m"}, "--ttl 1m0s: the API server issues no token for less than 10m0s; give --ttl 10m0s or more", "labctl cluster kubeconfig"},
		{[]string{"mgmt", "kubeconfig", "--read-only", "--revoke"}, "--read-only makes a token and --revoke ends them all; pass one", "labctl mgmt kubeconfig"},
	} {
		code, out, errOut := run(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(errOut, "Error: "+tc.want) || !strings.Contains(errOut, "Run '"+tc.cmd+" --help' for usage.") {
			t.Errorf("labctl %s: exit %d, stderr %q; want exit 2, %q and a pointer to '%s --help'", strings.Join(tc.args, " "), code, errOut, tc.want, tc.cmd)
		}
		if out != "" {
			t.Errorf("labctl %s: a usage error printed to stdout: %q", strings.Join(tc.args, " "), out)
		}
	}
	// A group alone is a question, not a mistake: its help, exit 0.
	if code, out, _ := run(t, "", "cluster"); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("labctl cluster: exit %d\n%s", code, out)
	}
}

// 'cluster scale' refuses flags no worker pool could take before it reads
// lab.yaml's management cluster: the Mgmt given here fails the test.
func TestClusterScaleRefusesFlagsFirst(t *testing.T) {
	lab := testLab(t)
	noCluster := func(f *cmdutil.Factory) {
		f.Mgmt = func(context.Context) (*kube.Client, error) {
			t.Error("cluster scale reached the management cluster before refusing its flags")
			return nil, errors.New("no cluster in this test")
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give --min and --max (an autoscaled pool) or --replicas (a fixed pool)"},
		{[]string{"--min", "3", "--max", "1"}, "--max 1: must be >= --min (3), got 1"},
		{[]string{"--replicas", "2", "--max", "3"}, "--replicas sets a fixed pool's count and --min/--max an autoscaled pool's bounds; pass one kind"},
		{[]string{"--replicas", "-1"}, "--replicas -1: must be 0 or more"},
		{[]string{"--min", "-1"}, "--min -1: must be 0 or more"},
		{[]string{"--max", "0"}, "--max 0: must be at least 1"},
	} {
		args := append([]string{"cluster", "scale", "lab1", "-c", lab}, tc.args...)
		code, _, errOut := runOn(t, terminal{}, "", noCluster, args...)
		if code != exitUsage || !strings.Contains(errOut, "Error: "+tc.want) || !strings.Contains(errOut, "labctl cluster scale --help") {
			t.Errorf("labctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(args, " "), code, errOut, tc.want)
		}
	}
}

// --yes is offered only where labctl asks before it deletes or
// upgrades (an upgrade replaces machines and restarts components).
func TestYesOnlyWhereAsked(t *testing.T) {
	root := NewRoot(testFactory())
	asking := map[string]bool{"labctl cluster delete": true, "labctl mgmt down": true, "labctl mgmt upgrade": true, "labctl cluster upgrade": true, "labctl gc": true}
	for _, c := range allCommands(root) {
		asks := asking[c.CommandPath()]
		if has := c.Flags().Lookup("yes") != nil; has != asks {
			t.Errorf("%s: --yes offered = %v, want %v", c.CommandPath(), has, asks)
		}
	}
}

// Without a terminal on stdin, a deletion that would ask refuses and says
// to pass --yes; nothing is read from the script's stdin as an answer.
func TestDeleteWithoutTerminalNeedsYes(t *testing.T) {
	srv, lab := proxmoxLab(t)
	code, _, errOut := runOn(t, terminal{err: true}, "y\n", nil, "mgmt", "down", "-c", lab, "--skip-cluster-check")
	if code != 1 || !strings.Contains(errOut, "stdin is not a terminal; pass --yes") {
		t.Fatalf("mgmt down without a terminal: exit %d\n%s", code, errOut)
	}
	if n := len(srv.VMs()); n != 1 {
		t.Errorf("%d VMs left, want the 1 that was there", n)
	}
	// With a terminal it asks, and "y" deletes.
	code, _, errOut = runOn(t, terminal{in: true, err: true}, "y\n", nil, "mgmt", "down", "-c", lab, "--skip-cluster-check")
	if code != 0 || !strings.Contains(errOut, "with their disks? [y/N]") || len(srv.VMs()) != 0 {
		t.Errorf("mgmt down on a terminal: exit %d, %d VMs left\n%s", code, len(srv.VMs()), errOut)
	}
}

// testLab writes the example lab with a public key that exists.
func testLab(t *testing.T) string {
	t.Helper()
	return testLabFrom(t, "../examples/lab.yaml")
}

// testLabFrom is testLab from another example.
func testLabFrom(t *testing.T, example string) string {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "id.pub")
	if err := os.WriteFile(key, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	lab := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(lab, []byte(strings.Replace(string(data), "~/.ssh/id_ed25519.pub", key, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return lab
}

// isJSON fails unless out is one JSON document.
func isJSON(t *testing.T, what, out string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Errorf("%s -o json is not JSON: %v\n%s", what, err, out)
	}
}

// proxmoxLab is the example lab pointed at a strict fake PVE on loopback
// holding the lab's management VM, written to a file for -c.
func proxmoxLab(t *testing.T) (*pvetest.Server, string) {
	t.Helper()
	srv := pvetest.New(t, pvetest.WithAddr("127.0.0.2:0"))
	srv.AddVM("pv1-1", 201, "labctl-mgmt", 1024, true, false, "labctl", "labctl-lab-home")
	raw, err := os.ReadFile(testLab(t))
	if err != nil {
		t.Fatal(err)
	}
	out := testbed.EditLab(t, raw, srv.URL, srv.Secret, func(_, pve map[string]any) {
		pve["tls"] = map[string]any{"fingerprint": proxmox.Fingerprint(srv.Certificate())}
	})
	p := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	return srv, p
}

// testFactory is a factory over buffers, for building the command tree.
func testFactory() *cmdutil.Factory {
	io, _, _, _ := ui.Test()
	return cmdutil.New(io, &cmdutil.Settings{})
}

// -v and -vvv pass the Proxmox driver's request trace through to stderr,
// without the token secret.
func TestVerboseTracesProxmoxCalls(t *testing.T) {
	srv, lab := proxmoxLab(t)
	for _, v := range []string{"-v", "-vvv"} {
		code, _, errOut := run(t, "", "image", "list", "-c", lab, v)
		if code != 0 || !strings.Contains(errOut, "proxmox: SEND: GET - "+srv.URL+"/api2/json/") {
			t.Errorf("image list %s: exit %d, no request trace on stderr:\n%s", v, code, errOut)
		}
		if strings.Contains(errOut, srv.Secret) {
			t.Errorf("image list %s printed the token secret", v)
		}
	}
	if code, _, errOut := run(t, "", "image", "list", "-c", lab); code != 0 || strings.Contains(errOut, "SEND:") {
		t.Errorf("image list without -v: exit %d, traced:\n%s", code, errOut)
	}
}
