package cmd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMgmtUpDryRunShowsTheDefaultLab runs 'labctl mgmt up --dry-run' with
// no lab.yaml: labctl takes its built-in one-machine lab and plans it
// against the real libvirtd on qemu:///system, reading only. Before and
// after, the host's pool and network are compared: nothing may change.
func TestMgmtUpDryRunShowsTheDefaultLab(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Chdir(t.TempDir()) // no ./lab.yaml here
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDryRun test@labctl\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if os.Geteuid() != 0 && os.Getenv("LABCTL_REQUIRE_LIBVIRT") == "" {
		// The machine's libvirtd lets root in; another user needs polkit
		// or the libvirt group, which a test cannot grant itself.
		t.Skip("qemu:///system is root's here; make test as root runs this")
	}
	if _, err := os.Stat("/run/libvirt/libvirt-sock"); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LABCTL_REQUIRE_LIBVIRT") != "" {
			t.Fatal("libvirtd is not running; make test starts it (hack/libvirt-testbed/host-up.sh)")
		}
		t.Skip("libvirtd is not running; make test (as root) starts it")
	}
	poolBefore, netBefore := exists(t, "pool-info", "default"), exists(t, "net-info", "labctl")

	code, out, errOut := run(t, "", "mgmt", "up", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	want := []string{
		"lab local (built-in local-kvm example), management VM labctl-mgmt on hypervisor local",
		"prepare hypervisor local",
		"cloud image ubuntu-24.04-server-cloudimg-amd64.img",
		"would: download https://cloud-images.ubuntu.com/releases/noble/release-20251113/ubuntu-24.04-server-cloudimg-amd64.img, check it against the sha256 listed in https://cloud-images.ubuntu.com/releases/noble/release-20251113/SHA256SUMS, and put it on local",
		"would: create VM labctl-mgmt on local: 2 CPUs, 4Gi memory, 20Gi disk, address 10.213.0.10/24, k3s v1.35.4+k3s1 by cloud-init",
		"would: start VM labctl-mgmt",
		"wait for the address of labctl-mgmt (would run)",
		"wait for the k3s API (would run)",
		"would: read /etc/rancher/k3s/k3s.yaml from the VM over SSH (host key checked against",
		"would: install the management stack with mgmt install",
		"dry run: nothing was changed",
	}
	if !poolBefore {
		want = append(want, "would: define storage pool default (directory /var/lib/libvirt/images) and start it")
	}
	if !netBefore {
		want = append(want, "would: define NAT network labctl (10.213.0.0/24, gateway 10.213.0.1, bridge lc-labctl) and start it")
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("the plan lacks %q:\n%s", w, errOut)
		}
	}
	if exists(t, "pool-info", "default") != poolBefore || exists(t, "net-info", "labctl") != netBefore {
		t.Error("a dry run changed the host's pools or networks")
	}
	if _, err := os.Stat(filepath.Join(home, ".config", "labctl")); err == nil {
		t.Error("a dry run wrote to the state folder")
	}
}

// exists asks virsh whether a pool or network is defined.
func exists(t *testing.T, verb, name string) bool {
	t.Helper()
	return exec.Command("virsh", "-c", "qemu:///system", verb, name).Run() == nil
}
