package libvirttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/vmssh"
)

// The machine's real libvirtd, as the real-VM tests share it
// (hack/libvirt-testbed/host-up.sh starts it): their NAT network, its
// subnet, and the lock through which runs from several checkouts take
// turns, since there can be only one such network per machine.
const (
	RealNetwork  = "labctl-test"
	RealPool     = "labctl-test"
	RealSubnet   = "10.213.0.0/24"
	RealGateway  = "10.213.0.1"
	RealVMLock   = "/run/lock/labctl-libvirt-vms.lock"
	RealSocket   = "/run/libvirt/libvirt-sock"
	TestImageRel = ".cache/libvirt-testbed/debian12-cloud-v2.qcow2"
)

// TakeVMTurn holds the machine-wide real-VM lock until the test ends:
// register this cleanup before the ones that remove the test's network
// and VMs, so it runs after them.
func TakeVMTurn(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(RealVMLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("opening the real-VM lock: %v", err)
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("taking the real-VM lock %s: %v", RealVMLock, err)
		}
	case <-t.Context().Done():
		t.Fatalf("waiting for the real-VM lock %s: %v", RealVMLock, t.Context().Err())
	}
	if waited := time.Since(began); waited > time.Second {
		t.Logf("waited %s for another real-VM run on this machine", waited.Round(time.Second))
	}
	t.Cleanup(func() { _ = f.Close() }) // closing releases the lock
	sweep(t)
}

// ModuleRoot is the checkout, where the test image and the test-bed
// scripts are (testbed.ModuleRoot), or the test fails.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// sweep removes what a real-VM test killed before its cleanup left (a
// pool holding another build's test image, domains, the network), so the
// test starts from nothing and its own "nothing left" checks mean
// something. Only the turn's holder may: no other test uses them now.
func sweep(t testing.TB) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), filepath.Join(ModuleRoot(t), "hack", "libvirt-testbed", "sweep.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("sweeping the real-VM leftovers: %v: %s", err, out)
	}
	if left := strings.TrimSpace(string(out)); left != "" {
		t.Logf("a real-VM run killed before its cleanup left these, now removed:\n%s", left)
	}
}

// Fence rejects anything the bridge would forward off itself, so guests
// reach this machine only. libvirt adds its own FORWARD rules when the
// network starts; this one goes above them.
func Fence(t testing.TB, bridge string) {
	t.Helper()
	rule := []string{"FORWARD", "-i", bridge, "!", "-o", bridge, "-j", "REJECT"}
	if out, err := exec.Command("iptables", append([]string{"-I"}, append(rule[:1:1], append([]string{"1"}, rule[1:]...)...)...)...).CombinedOutput(); err != nil {
		t.Fatalf("fencing bridge %s: %v: %s", bridge, err, out)
	}
	t.Cleanup(func() {
		for exec.Command("iptables", append([]string{"-D"}, rule...)...).Run() == nil {
		}
	})
	out, err := exec.Command("iptables", "-S", "FORWARD").Output()
	if err != nil {
		t.Fatal(err)
	}
	first := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-A FORWARD") {
			first = l
			break
		}
	}
	if !strings.Contains(first, "-i "+bridge) || !strings.Contains(first, "REJECT") {
		t.Fatalf("the fence is not the first FORWARD rule:\n%s", out)
	}
}

// RealImage is the test image hack/libvirt-testbed/build-image.sh builds
// in the checkout, or $LABCTL_TEST_IMAGE, with its
// sha256, once the machine's libvirtd runs. Otherwise the test skips, or
// fails under CI or LABCTL_REQUIRE_LIBVIRT: a CI run that skips its real
// tests proves nothing. Not root, it skips: qemu:///system is root's.
func RealImage(t testing.TB) (path, sum string) {
	t.Helper()
	const hint = "; run hack/libvirt-testbed/build-image.sh and hack/libvirt-testbed/host-up.sh (make test does)"
	if os.Geteuid() != 0 && os.Getenv("LABCTL_REQUIRE_LIBVIRT") == "" {
		// The machine's libvirtd lets root in; another user needs polkit
		// or the libvirt group, which a test cannot grant itself.
		t.Skip("qemu:///system is root's here; make test as root runs the real-VM tests")
	}
	if _, err := os.Stat(RealSocket); err != nil {
		skipOrFailWhy(t, "libvirtd is not running ("+RealSocket+" is missing)"+hint)
	}
	path = os.Getenv("LABCTL_TEST_IMAGE")
	if path == "" {
		path = filepath.Join(ModuleRoot(t), TestImageRel)
	}
	b, err := os.ReadFile(path + ".sha256")
	if err != nil {
		skipOrFailWhy(t, "the test image is missing: "+err.Error()+hint)
	}
	return path, strings.TrimSpace(string(b))
}

// SSHBanner waits until an sshd answers on addr and returns its banner,
// as mgmt up waits for its VM: the test image, like Ubuntu's cloud image,
// has no guest agent to report an address.
func SSHBanner(ctx context.Context, addr netip.Addr) (string, error) {
	var dialer net.Dialer
	for {
		conn, err := dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(addr, 22).String())
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			_ = conn.Close()
			if rerr == nil {
				return strings.TrimSpace(line), nil
			}
			err = rerr
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no sshd banner from %s: %w (last: %v)", addr, ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// ReadWhenUp reads path on a booting guest over SSH (vmssh.ReadFile),
// trying again while its sshd is not ready yet or cloud-init has not
// written the file, until ctx ends.
func ReadWhenUp(ctx context.Context, target vmssh.Target, path string) ([]byte, error) {
	for {
		got, err := vmssh.ReadFile(ctx, target, path)
		if (!errors.Is(err, vmssh.ErrNotReady) && !errors.Is(err, vmssh.ErrNotFound)) || ctx.Err() != nil {
			return got, err
		}
		select {
		case <-ctx.Done():
			return got, err
		case <-time.After(2 * time.Second):
		}
	}
}
