package libvirt

// Real-VM tests: a real libvirtd and QEMU booting the test image that
// hack/libvirt-testbed/build-image.sh builds, with labctl's own cloud-init.
// hack/libvirt-testbed/host-up.sh starts the daemons; make test does both.
// Without them the tests skip, unless CI or LABCTL_REQUIRE_LIBVIRT is set:
// then they fail, because a CI run that skips its real tests proves nothing.
//
// Everything stays on this machine: the image is served on loopback, and
// the VMs sit on the test's own NAT network labctl-test (10.213.0.0/24),
// whose bridge may forward nothing off itself (an iptables REJECT rule).
// There can be one such network per machine, so runs from several
// checkouts take turns through vmLock.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/vmssh"
)

const (
	realNetwork = libvirttest.RealNetwork
	realPool    = libvirttest.RealPool
	realLab     = "labctl-test"
	libvirtSock = libvirttest.RealSocket
	bootTimeout = 10 * time.Minute // TCG on 2 busy cores
)

type realHost struct {
	d       *Driver
	image   hypervisor.Image
	spec    hypervisor.ImageSpec
	pubKey  string
	pubFile string
	bridge  string
	imgPath string
	// hostKeys are the SSH host keys the test's cloud-init gave each VM.
	hostKeys map[string]vmssh.HostKey
}

// newRealHost connects to the real libvirtd, prepares the test pool and
// network, fences the network in, and puts the test image in the pool.
// Cleanup removes all of it and checks that nothing is left.
func newRealHost(t *testing.T) *realHost {
	t.Helper()
	img, sum := libvirttest.RealImage(t)
	libvirttest.TakeVMTurn(t)
	ctx := t.Context()
	d, err := New(ctx, Options{
		Name: "testbed", URI: "qemu:///system", Pool: realPool, PoolPath: "/var/lib/libvirt/images/" + realPool,
		Network: realNetwork, Subnet: netip.MustParsePrefix("10.213.0.0/24"), Gateway: netip.MustParseAddr("10.213.0.1"),
		LocalOnlyDNS: true, DomainType: os.Getenv("LABCTL_TEST_DOMAIN_TYPE"),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &realHost{d: d, imgPath: img, hostKeys: map[string]vmssh.HostKey{}}
	t.Cleanup(func() { h.cleanup(t) })
	if err := d.PrepareHost(ctx); err != nil {
		t.Fatal(err)
	}
	if h.bridge, err = d.NetworkBridge(ctx); err != nil {
		t.Fatal(err)
	}
	libvirttest.Fence(t, h.bridge)

	// Serve the image on loopback; EnsureImage streams it into the pool.
	srv := httptest.NewServer(http.FileServer(http.Dir(filepath.Dir(img))))
	t.Cleanup(srv.Close)
	h.spec = hypervisor.ImageSpec{URL: srv.URL + "/" + filepath.Base(img), Checksum: "sha256:" + sum}
	began := time.Now()
	if h.image, err = d.EnsureImage(ctx, h.spec); err != nil {
		t.Fatal(err)
	}
	t.Logf("image uploaded into pool %s by stream and verified in %s", realPool, time.Since(began).Round(time.Millisecond))
	// The user's key as ssh-keygen leaves it, read by labctl's one helper;
	// never the developer's ssh-agent.
	t.Setenv("SSH_AUTH_SOCK", "")
	var pub ssh.PublicKey
	h.pubFile, pub = sshtest.UserKey(t)
	h.pubKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	return h
}

func (h *realHost) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vms, err := h.d.ListVMs(ctx, realLab)
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for _, vm := range vms {
		if err := h.d.DeleteVM(ctx, vm); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	if h.spec.URL != "" {
		if err := h.d.RemoveImage(ctx, h.spec); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	if err := h.d.RemoveNetwork(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	if err := h.d.RemovePool(ctx); err != nil {
		t.Errorf("cleanup: %v", err)
	}
	// Nothing of the test may be left: no domain, volume, pool or network.
	if doms, _, err := h.d.l.ConnectListAllDomains(1, 0); err == nil {
		for _, dom := range doms {
			if n := dom.Name; strings.HasPrefix(n, "labctl-test-") || strings.HasPrefix(n, "bench-") {
				t.Errorf("domain %s left behind", n)
			}
		}
	}
	if _, err := h.d.l.StoragePoolLookupByName(realPool); err == nil {
		t.Errorf("pool %s left behind", realPool)
	}
	if _, err := h.d.l.NetworkLookupByName(realNetwork); err == nil {
		t.Errorf("network %s left behind", realNetwork)
	}
	if _, err := os.Stat("/var/lib/libvirt/images/" + realPool); err == nil {
		t.Errorf("pool folder /var/lib/libvirt/images/%s left behind", realPool)
	}
	_ = h.d.Close()
}

// vmSpec is a test VM with labctl's cloud-init: user tester with the key,
// an SSH host key labctl made, a marker file holding token, a static
// address on the test network.
func (h *realHost) vmSpec(t *testing.T, name, ip, token string) hypervisor.VMSpec {
	t.Helper()
	mac := hypervisor.StableMAC(realLab, name)
	hk, err := vmssh.GenerateHostKey()
	if err != nil {
		t.Fatal(err)
	}
	h.hostKeys[name] = hk
	ud, err := cloudinit.UserData(cloudinit.Config{
		Hostname: name, User: "tester", SSHKeys: []string{h.pubKey}, HostKey: hk.CloudInit(),
		Files:        []cloudinit.File{{Path: "/var/lib/labctl-test/marker", Content: []byte(token), Permissions: "0600"}},
		FinalMessage: "LABCTL-TEST-CLOUD-INIT-DONE uptime=$UPTIME",
	})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := cloudinit.NetworkConfig(cloudinit.Static{
		MAC: mac, Address: netip.MustParsePrefix(ip + "/24"),
		Gateway: netip.MustParseAddr("10.213.0.1"), DNS: []netip.Addr{netip.MustParseAddr("10.213.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return hypervisor.VMSpec{
		Lab: realLab, Name: name, CPUs: 2, MemoryMiB: 1024, DiskGiB: 10, Image: h.image,
		Network:   hypervisor.NetworkSpec{Network: realNetwork, MAC: mac},
		CloudInit: hypervisor.CloudInit{Hostname: name, User: "tester", SSHKeys: []string{h.pubKey}, UserData: ud, NetworkConfig: nc},
	}
}

// boot creates and starts a VM with the static address ip and waits until
// its sshd answers there, as mgmt up does with management.ip: the image,
// like Ubuntu's cloud image, has no guest agent to report an address. It
// returns the create-to-sshd time.
func (h *realHost) boot(ctx context.Context, spec hypervisor.VMSpec, ip string) (hypervisor.VM, netip.Addr, time.Duration, error) {
	began := time.Now()
	vm, err := h.d.CreateVM(ctx, spec)
	if err != nil {
		return vm, netip.Addr{}, 0, err
	}
	if err := h.d.StartVM(ctx, vm); err != nil {
		return vm, netip.Addr{}, 0, err
	}
	addr := netip.MustParseAddr(ip)
	_, err = libvirttest.SSHBanner(ctx, addr)
	return vm, addr, time.Since(began), err
}

func randomToken(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestRealVM creates a VM from the test image with labctl's cloud-init,
// first interrupted mid-create and re-run (no duplicate, no leftovers),
// reaches sshd on its static address, logs in with the user's key checking
// the host key labctl gave it through cloud-init, reads labctl's marker
// file as mgmt up reads k3s's kubeconfig, and deletes everything. The
// image has no guest agent, as Ubuntu's cloud image has none.
func TestRealVM(t *testing.T) {
	h := newRealHost(t)
	token := randomToken(t)
	spec := h.vmSpec(t, "labctl-test-vm1", "10.213.0.10", token)
	before := volumeNames(t, h.d)

	// Interrupted create, then a re-run: one VM.
	ctx, cancel := context.WithCancel(t.Context())
	h.d.stage = func(s string) {
		if s == "seed uploaded" {
			cancel()
		}
	}
	if _, err := h.d.CreateVM(ctx, spec); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted CreateVM = %v", err)
	}
	h.d.stage = nil
	if vms, _ := h.d.ListVMs(t.Context(), realLab); len(vms) != 0 {
		t.Fatalf("an interrupted create left VMs: %+v", vms)
	}
	if after := volumeNames(t, h.d); len(after) != len(before) {
		t.Fatalf("an interrupted create left volumes: %v (before %v)", after, before)
	}

	bootCtx, stop := context.WithTimeout(t.Context(), bootTimeout)
	defer stop()
	vm, addr, took, err := h.boot(bootCtx, spec, "10.213.0.10")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("labctl: create to sshd on %s in %s (%s guest)", addr, took.Round(100*time.Millisecond), mustType(t, h.d))
	if again, err := h.d.CreateVM(t.Context(), spec); err != nil || again.Name != vm.Name {
		t.Fatalf("re-running CreateVM on a running VM: %+v, %v", again, err)
	}
	if vms, _ := h.d.ListVMs(t.Context(), realLab); len(vms) != 1 || !vms[0].Running {
		t.Fatalf("ListVMs = %+v, want the one running VM", vms)
	}
	// labctl's write_files ran: read the root-only marker over SSH, with
	// the user's key, checking the host key cloud-init installed.
	auth, err := vmssh.UserAuth([]string{h.pubKey}, h.pubFile)
	if err != nil {
		t.Fatal(err)
	}
	target := vmssh.Target{Addr: netip.AddrPortFrom(addr, 22), User: "tester", HostKey: h.hostKeys[vm.Name].PublicKey(), Auth: auth}
	got, err := libvirttest.ReadWhenUp(bootCtx, target, "/var/lib/labctl-test/marker")
	if err != nil || string(got) != token {
		t.Fatalf("reading the marker over SSH = %q, %v; want %q", got, err, token)
	}
	// sshd may be restarting meanwhile: cloud-init's config stage
	// (cc_set_passwords, for ssh_pwauth: false) rewrites sshd_config and
	// restarts it after the init stage's write_files made the marker that
	// was just read. mgmt up retries ErrNotReady the same way (up.go).
	readOnceUp := func(target vmssh.Target, path string) error {
		var err error
		for range 30 {
			_, err = vmssh.ReadFile(bootCtx, target, path)
			if !errors.Is(err, vmssh.ErrNotReady) {
				break
			}
			time.Sleep(2 * time.Second)
		}
		return err
	}
	if err := readOnceUp(target, "/nonexistent"); !errors.Is(err, vmssh.ErrNotFound) {
		t.Errorf("reading a missing file over SSH = %v, want ErrNotFound", err)
	}
	other, err := vmssh.GenerateHostKey()
	if err != nil {
		t.Fatal(err)
	}
	wrong := target
	wrong.HostKey = other.PublicKey()
	wrongErr := readOnceUp(wrong, "/var/lib/labctl-test/marker")
	if wrongErr == nil || !strings.Contains(wrongErr.Error(), "refusing") {
		t.Errorf("a login expecting another host key = %v, want a refusal", wrongErr)
	}
	// Nothing answers on the agent channel: the guest has no agent.
	if _, err := h.d.ReadFile(bootCtx, vm, "/var/lib/labctl-test/marker"); err == nil {
		t.Error("the guest agent answered; the test image must not have one")
	} else {
		t.Logf("guest agent, as on Ubuntu's cloud image: %v", err)
	}

	banner, err := libvirttest.SSHBanner(bootCtx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(banner, "SSH-2.0-OpenSSH") {
		t.Fatalf("sshd banner %q", banner)
	}
	t.Logf("sshd on %s: %s", addr, banner)
	if _, err := os.Stat("/var/log/libvirt/qemu/labctl-test-vm1-console.log"); err != nil {
		t.Errorf("serial console log: %v", err)
	}

	caps, err := h.d.Capacity(t.Context())
	if err != nil || len(caps) != 1 || caps[0].RunningVMs < 1 || caps[0].ReservedMiB < 1024 {
		t.Errorf("Capacity = %+v, %v", caps, err)
	}

	if err := h.d.DeleteVM(t.Context(), vm); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.FindVM(t.Context(), realLab, vm.Name); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("FindVM after DeleteVM = %v", err)
	}
	if after := volumeNames(t, h.d); len(after) != len(before) {
		t.Errorf("DeleteVM left volumes: %v", after)
	}
}

func mustType(t *testing.T, d *Driver) string {
	typ, err := d.DomainType()
	if err != nil {
		t.Fatal(err)
	}
	return typ
}

// TestBenchVirshVersusLabctl is the benchmark: the same VM (image, size,
// network, cloud-init documents) made once with plain virsh and
// genisoimage (hack/libvirt-testbed/virsh-vm.sh) and once by labctl's
// driver, create to address; then two labctl VMs at once. It runs only
// with LABCTL_BENCH=1 (make bench-libvirt): four TCG boots take minutes.
// LABCTL_BENCH_LABCTL_FIRST=1 swaps the order of the first two.
func TestBenchVirshVersusLabctl(t *testing.T) {
	if os.Getenv("LABCTL_BENCH") == "" {
		t.Skip("set LABCTL_BENCH=1 (make bench-libvirt) to run the virsh benchmark")
	}
	h := newRealHost(t)
	ctx, stop := context.WithTimeout(t.Context(), 4*bootTimeout)
	defer stop()
	typ := mustType(t, h.d)

	// Baseline: virsh with the same documents labctl renders.
	script := filepath.Join(libvirttest.ModuleRoot(t), "hack", "libvirt-testbed", "virsh-vm.sh")
	var virshSecs float64
	viaVirsh := func() {
		base := h.vmSpec(t, "bench-virsh", "10.213.0.11", randomToken(t))
		seedDir := t.TempDir()
		md, _ := cloudinit.MetaData(cloudinit.InstanceID(base.Name, base.CloudInit.UserData, base.CloudInit.NetworkConfig), base.Name)
		for name, data := range map[string][]byte{"user-data": base.CloudInit.UserData, "meta-data": md, "network-config": base.CloudInit.NetworkConfig} {
			if err := os.WriteFile(filepath.Join(seedDir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = exec.Command(script, "--delete", "bench-virsh", realPool).Run() })
		cmd := exec.CommandContext(ctx, script, "bench-virsh", realPool, realNetwork, h.image.Volume, seedDir, base.Network.MAC, typ)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("virsh baseline: %v\n%s", err, stderr.String())
		}
		var ip string
		if _, err := fmt.Sscanf(string(out), "%s %g", &ip, &virshSecs); err != nil || ip != "10.213.0.11" {
			t.Fatalf("virsh baseline printed %q (%v)", out, err)
		}
		_ = exec.Command(script, "--delete", "bench-virsh", realPool).Run()
	}

	// labctl, same VM.
	var took time.Duration
	viaLabctl := func() {
		vm, addr, d, err := h.boot(ctx, h.vmSpec(t, "bench-labctl", "10.213.0.12", randomToken(t)), "10.213.0.12")
		if err != nil {
			t.Fatal(err)
		}
		if addr.String() != "10.213.0.12" {
			t.Errorf("labctl VM address %s", addr)
		}
		if err := h.d.DeleteVM(ctx, vm); err != nil {
			t.Fatal(err)
		}
		took = d
	}
	order := "virsh first"
	if os.Getenv("LABCTL_BENCH_LABCTL_FIRST") != "" {
		order = "labctl first"
		viaLabctl()
		viaVirsh()
	} else {
		viaVirsh()
		viaLabctl()
	}
	ratio := took.Seconds() / virshSecs
	t.Logf("BENCH create-to-address (%s guest, %s): virsh+genisoimage %.1fs, labctl %.1fs, ratio %.2f (goal <= 1.1)", typ, order, virshSecs, took.Seconds(), ratio)

	// Two labctl VMs at once.
	var wg sync.WaitGroup
	times := make([]time.Duration, 2)
	errs := make([]error, 2)
	began := time.Now()
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := fmt.Sprintf("10.213.0.%d", 21+i)
			_, _, times[i], errs[i] = h.boot(ctx, h.vmSpec(t, fmt.Sprintf("bench-c%d", i+1), ip, randomToken(t)), ip)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("BENCH two labctl VMs at once: %.1fs and %.1fs create-to-address, %.1fs wall", times[0].Seconds(), times[1].Seconds(), time.Since(began).Seconds())
	if ratio > 1.1 {
		t.Errorf("labctl is %.2fx the virsh baseline; the goal is <= 1.1", ratio)
	}
}
