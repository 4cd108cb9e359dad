package libvirt

// These tests run every driver method against libvirt's built-in test
// driver (test:///default) in the test's own libvirtd (daemon_test.go):
// real libvirt, real RPC, real XML validation. The test driver keeps its
// state for the daemon's life and has no volume streams
// (virStorageVolUpload is "not supported by the connection driver"), so
// uploads go through recordUploads here; TestRealVM in realvm_test.go
// covers the real stream on a real libvirtd.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/sshtest"
)

var nameSeq atomic.Int64

// uniq gives each test its own pool and network names: the test driver's
// state is shared by every connection to the daemon.
func uniq(prefix string) string { return fmt.Sprintf("%s%d", prefix, nameSeq.Add(1)) }

// uploads records what the driver streamed into which volume.
type uploads struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (u *uploads) get(vol string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.data[vol]
}

func recordUploads(d *Driver) *uploads {
	u := &uploads{data: map[string][]byte{}}
	d.upload = func(ctx context.Context, vol lv.StorageVol, r readerLen) error {
		name := vol.Name
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		u.mu.Lock()
		u.data[name] = b
		u.mu.Unlock()
		return nil
	}
	return u
}

func testOptions(t *testing.T) Options {
	return Options{
		Name: "local", URI: testLibvirtd(t).URI(), Pool: uniq("pool"), PoolPath: "/labctl-test-pool",
		Network: uniq("net"), Subnet: netip.MustParsePrefix("10.213.0.0/24"), Gateway: netip.MustParseAddr("10.213.0.1"),
		LocalOnlyDNS: true,
	}
}

func newTestDriver(t *testing.T, o Options) (*Driver, *uploads) {
	t.Helper()
	d, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if err := d.PrepareHost(t.Context()); err != nil {
		t.Fatal(err)
	}
	return d, recordUploads(d)
}

// fakeQcow2 is a qcow2 header with the given virtual size and a body.
func fakeQcow2(virtual uint64, body string) []byte {
	h := make([]byte, 32)
	copy(h, qcow2Magic)
	binary.BigEndian.PutUint32(h[4:], 3)
	binary.BigEndian.PutUint64(h[24:], virtual)
	return append(h, body...)
}

// imageServer serves an image and its SHA256SUMS on loopback and counts
// the image downloads.
func imageServer(t *testing.T, name string, img []byte) (*httptest.Server, *atomic.Int64, string) {
	t.Helper()
	sum := sha256.Sum256(img)
	hexSum := hex.EncodeToString(sum[:])
	var gets atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/images/"+name, func(w http.ResponseWriter, _ *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Length", fmt.Sprint(len(img)))
		_, _ = w.Write(img)
	})
	mux.HandleFunc("/images/SHA256SUMS", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s *other.img\n%s *%s\n", strings.Repeat("0", 64), hexSum, name)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &gets, hexSum
}

func volumeNames(t *testing.T, d *Driver) []string {
	t.Helper()
	p, err := d.pool()
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.volumeNames(p)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestPrepareHostDefinesPoolAndNetwork(t *testing.T) {
	ctx := t.Context()
	o := testOptions(t)
	d, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defaultWasActive := networkActive(t, d, "default")

	plan, err := d.PlanHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || !strings.Contains(plan[0], "define storage pool "+o.Pool) || !strings.Contains(plan[1], "define NAT network "+o.Network+" (10.213.0.0/24") {
		t.Fatalf("plan = %q", plan)
	}
	if err := d.PrepareHost(ctx); err != nil {
		t.Fatal(err)
	}
	if plan, err := d.PlanHost(ctx); err != nil || len(plan) != 0 {
		t.Fatalf("plan after prepare = %q, %v; want nothing", plan, err)
	}
	if err := d.PrepareHost(ctx); err != nil {
		t.Fatalf("second PrepareHost: %v", err)
	}

	n, err := d.l.NetworkLookupByName(o.Network)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := d.l.NetworkGetXMLDesc(n, 0)
	var nx libvirtxml.Network
	if err := nx.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	if nx.Forward == nil || nx.Forward.Mode != "nat" || len(nx.IPs) != 1 || nx.IPs[0].Address != "10.213.0.1" {
		t.Fatalf("network XML: %s", raw)
	}
	r := nx.IPs[0].DHCP.Ranges[0]
	if r.Start != "10.213.0.128" || r.End != "10.213.0.254" {
		t.Errorf("DHCP range %s-%s, want the upper half 10.213.0.128-10.213.0.254", r.Start, r.End)
	}
	if nx.Bridge == nil || nx.Bridge.Name != bridgeName(o.Network) {
		t.Errorf("bridge %+v", nx.Bridge)
	}
	// The test driver drops dnsmasq options; TestNetworkXML checks them.
	if nx.Domain == nil || nx.Domain.LocalOnly != "yes" {
		t.Errorf("local-only DNS domain not set: %s", raw)
	}
	if on, _ := d.l.NetworkIsActive(n); on != 1 {
		t.Error("network not started")
	}
	if auto, _ := d.l.NetworkGetAutostart(n); auto != 1 {
		t.Error("network not set to autostart")
	}
	if got := networkActive(t, d, "default"); got != defaultWasActive {
		t.Errorf("PrepareHost changed libvirt's default network (active %v -> %v)", defaultWasActive, got)
	}
	if b, err := d.NetworkBridge(ctx); err != nil || b != bridgeName(o.Network) {
		t.Errorf("NetworkBridge = %q, %v", b, err)
	}

	if err := d.RemoveNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.RemovePool(ctx); err != nil {
		t.Fatal(err)
	}
	if plan, _ := d.PlanHost(ctx); len(plan) != 2 {
		t.Errorf("after removal plan = %q, want both again", plan)
	}
}

func networkActive(t *testing.T, d *Driver, name string) bool {
	t.Helper()
	n, err := d.l.NetworkLookupByName(name)
	if err != nil {
		return false
	}
	on, _ := d.l.NetworkIsActive(n)
	return on == 1
}

func TestPlanHostNeedsSubnetForMissingNetwork(t *testing.T) {
	o := testOptions(t)
	o.Subnet, o.Gateway = netip.Prefix{}, netip.Addr{}
	d, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.PlanHost(t.Context()); err == nil || !strings.Contains(err.Error(), "network.cidr") {
		t.Fatalf("PlanHost = %v, want an error naming network.cidr", err)
	}
}

func TestEnsureImageVerifiesAndIsIdempotent(t *testing.T) {
	ctx := t.Context()
	d, up := newTestDriver(t, testOptions(t))
	img := fakeQcow2(3<<30, "the image body")
	srv, gets, hexSum := imageServer(t, "debian12.qcow2", img)
	spec := hypervisor.ImageSpec{URL: srv.URL + "/images/debian12.qcow2", ChecksumURL: srv.URL + "/images/SHA256SUMS"}

	if _, err := d.FindImage(ctx, spec); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Fatalf("FindImage before upload = %v, want ErrNotFound", err)
	}
	got, err := d.EnsureImage(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got.Volume, "/debian12.qcow2") {
		t.Errorf("image volume %q", got.Volume)
	}
	if !bytes.Equal(up.get("debian12.qcow2"), img) {
		t.Errorf("uploaded bytes differ from the image")
	}
	vols := volumeNames(t, d)
	if !slices.Contains(vols, "debian12.qcow2.sha256-"+hexSum) {
		t.Errorf("no verified marker among %v", vols)
	}
	if found, err := d.FindImage(ctx, hypervisor.ImageSpec{URL: spec.URL, Checksum: "sha256:" + hexSum}); err != nil || found != got {
		t.Errorf("FindImage = %v, %v", found, err)
	}
	if _, err := d.EnsureImage(ctx, spec); err != nil || gets.Load() != 1 {
		t.Errorf("second EnsureImage: err %v, downloads %d; want no new download", err, gets.Load())
	}
	// A different pinned checksum for the same file name is refused.
	other := hypervisor.ImageSpec{URL: spec.URL, Checksum: "sha256:" + strings.Repeat("a", 64)}
	if _, err := d.EnsureImage(ctx, other); err == nil || !strings.Contains(err.Error(), "holds another image") {
		t.Errorf("EnsureImage with another checksum = %v", err)
	}
	if err := d.RemoveImage(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if vols := volumeNames(t, d); len(vols) != 0 {
		t.Errorf("volumes left after RemoveImage: %v", vols)
	}
}

func TestEnsureImageRejectsBadDownloads(t *testing.T) {
	ctx := t.Context()
	d, _ := newTestDriver(t, testOptions(t))
	srv, _, _ := imageServer(t, "x.qcow2", fakeQcow2(1<<30, "body"))
	for name, tc := range map[string]struct {
		spec hypervisor.ImageSpec
		want string
	}{
		"checksum mismatch": {hypervisor.ImageSpec{URL: srv.URL + "/images/x.qcow2", Checksum: "sha256:" + strings.Repeat("b", 64)}, "does not match"},
		"404":               {hypervisor.ImageSpec{URL: srv.URL + "/images/missing.qcow2", Checksum: "sha256:" + strings.Repeat("b", 64)}, "404"},
		"not in SHA256SUMS": {hypervisor.ImageSpec{URL: srv.URL + "/images/y.qcow2", ChecksumURL: srv.URL + "/images/SHA256SUMS"}, "lists no sha256 for y.qcow2"},
		"no checksum":       {hypervisor.ImageSpec{URL: srv.URL + "/images/x.qcow2"}, "unverified"},
		"bad checksum":      {hypervisor.ImageSpec{URL: srv.URL + "/images/x.qcow2", Checksum: "md5:abc"}, "sha256:"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := d.EnsureImage(ctx, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EnsureImage = %v, want an error containing %q", err, tc.want)
			}
			if vols := volumeNames(t, d); len(vols) != 0 {
				t.Errorf("volumes left behind: %v", vols)
			}
		})
	}
}

func TestEnsureImageInterruptedLeavesNothing(t *testing.T) {
	d, _ := newTestDriver(t, testOptions(t))
	srv, _, hexSum := imageServer(t, "x.qcow2", fakeQcow2(1<<30, "body"))
	spec := hypervisor.ImageSpec{URL: srv.URL + "/images/x.qcow2", Checksum: "sha256:" + hexSum}
	for _, stage := range []string{"image volume created", "image uploaded"} {
		ctx, cancel := context.WithCancel(t.Context())
		d.stage = func(s string) {
			if s == stage {
				cancel()
			}
		}
		if _, err := d.EnsureImage(ctx, spec); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel at %q: err = %v", stage, err)
		}
		if vols := volumeNames(t, d); len(vols) != 0 {
			t.Fatalf("cancel at %q left %v", stage, vols)
		}
	}
	d.stage = nil
	if _, err := d.EnsureImage(t.Context(), spec); err != nil {
		t.Fatalf("re-run: %v", err)
	}
}

// vmSpec is a VM on the test driver with the image already in the pool.
func vmSpec(t *testing.T, d *Driver, lab, name string) hypervisor.VMSpec {
	t.Helper()
	srv, _, hexSum := imageServer(t, "base.qcow2", fakeQcow2(2<<30, "base"))
	img, err := d.EnsureImage(t.Context(), hypervisor.ImageSpec{URL: srv.URL + "/images/base.qcow2", Checksum: "sha256:" + hexSum})
	if err != nil {
		t.Fatal(err)
	}
	return hypervisor.VMSpec{
		Lab: lab, Name: name, CPUs: 2, MemoryMiB: 1024, DiskGiB: 10, Image: img,
		Network: hypervisor.NetworkSpec{Network: d.opts.Network, MAC: hypervisor.StableMAC(lab, name)},
		CloudInit: hypervisor.CloudInit{
			Hostname: name, UserData: []byte("#cloud-config\nhostname: " + name + "\n"),
			NetworkConfig: []byte("version: 2\n"),
		},
	}
}

func TestVMLifecycle(t *testing.T) {
	ctx := t.Context()
	d, up := newTestDriver(t, testOptions(t))
	spec := vmSpec(t, d, "lab-a", "vm-one")

	if _, err := d.FindVM(ctx, "lab-a", "vm-one"); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Fatalf("FindVM before create = %v", err)
	}
	vm, err := d.CreateVM(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Name != "vm-one" || vm.Lab != "lab-a" || vm.Running || vm.CPUs != 2 || vm.MemoryMiB != 1024 {
		t.Errorf("created VM = %+v", vm)
	}
	if !slices.Contains(vm.Tags, hypervisor.Tag) || !slices.Contains(vm.Tags, hypervisor.LabTag("lab-a")) {
		t.Errorf("tags %v lack labctl's", vm.Tags)
	}
	again, err := d.CreateVM(ctx, spec)
	if err != nil || again.Name != vm.Name {
		t.Fatalf("second CreateVM = %+v, %v", again, err)
	}

	// The domain as libvirt stored it.
	dx, raw := storedDomain(t, d, "vm-one")
	if dx.Type != "test" { // the test driver offers only "test" guests
		t.Errorf("domain type %q", dx.Type)
	}
	disks := dx.Devices.Disks
	if len(disks) != 2 || disks[0].Source.Volume.Volume != "vm-one-disk0.qcow2" || disks[1].Source.Volume.Volume != "vm-one-seed.iso" || disks[1].Device != "cdrom" {
		t.Errorf("disks: %s", raw)
	}
	if nic := dx.Devices.Interfaces[0]; nic.MAC.Address != spec.Network.MAC || nic.Source.Network.Network != d.opts.Network || nic.Model.Type != "virtio" {
		t.Errorf("NIC: %+v", nic)
	}
	if len(dx.Devices.Channels) != 1 || dx.Devices.Channels[0].Target.VirtIO.Name != guestAgentChannel {
		t.Errorf("no guest agent channel: %s", raw)
	}
	if len(dx.Devices.Serials) != 1 || dx.Devices.Serials[0].Log == nil || dx.Devices.Serials[0].Log.File != "/var/log/libvirt/qemu/vm-one-console.log" {
		t.Errorf("serial console not logged to a file: %s", raw)
	}
	if !strings.Contains(raw, MetadataNS) {
		t.Errorf("no labctl metadata: %s", raw)
	}

	// The seed ISO that went into the pool carries the VM's cloud-init.
	iso := up.get("vm-one-seed.iso")
	label, files, err := sshtest.SeedFiles(iso)
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	if label != "cidata" {
		t.Errorf("seed label %q", label)
	}
	if files["user-data"] != string(spec.CloudInit.UserData) || files["network-config"] != "version: 2\n" || !strings.Contains(files["meta-data"], "local-hostname: vm-one") {
		t.Errorf("seed files: %q", files)
	}

	if err := d.StartVM(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if err := d.StartVM(ctx, vm); err != nil {
		t.Fatalf("starting a running VM: %v", err)
	}
	if vm, _ = d.FindVM(ctx, "lab-a", "vm-one"); !vm.Running {
		t.Error("VM not running after StartVM")
	}

	// The test driver answers lease queries with a made-up address for the
	// domain's NIC (virsh domifaddr on test:///default).
	wctx, cancel := context.WithTimeout(ctx, 10*e9)
	defer cancel()
	addr, err := d.WaitAddress(wctx, vm)
	if err != nil {
		t.Fatal(err)
	}
	if !addr.Is4() {
		t.Errorf("address %v", addr)
	}

	// The test driver has no guest agent.
	if _, err := d.ReadFile(ctx, vm, "/etc/hostname"); err == nil || !strings.Contains(err.Error(), "guest agent") {
		t.Errorf("ReadFile on the test driver = %v, want a guest agent error", err)
	}

	caps, err := d.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(caps) != 1 || caps[0].CPUs < 1 || caps[0].MemoryMiB < 1 || caps[0].VMs < 2 || caps[0].RunningVMs < 1 || caps[0].ReservedMiB < 1024 {
		t.Errorf("capacity = %+v", caps)
	}

	if err := d.DeleteVM(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if _, err := d.FindVM(ctx, "lab-a", "vm-one"); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("FindVM after delete = %v", err)
	}
	for _, v := range volumeNames(t, d) {
		if strings.HasPrefix(v, "vm-one") {
			t.Errorf("volume %s left after DeleteVM", v)
		}
	}
	if err := d.DeleteVM(ctx, vm); err != nil {
		t.Errorf("deleting a deleted VM: %v", err)
	}
}

const e9 = 1_000_000_000 // one second in nanoseconds, for time.Duration

func TestListVMsByLabAndForeignDomains(t *testing.T) {
	ctx := t.Context()
	d, _ := newTestDriver(t, testOptions(t))
	for _, v := range []struct{ lab, name string }{{"lab-l1", "l1-a"}, {"lab-l1", "l1-b"}, {"lab-l2", "l2-a"}} {
		if _, err := d.CreateVM(ctx, vmSpec(t, d, v.lab, v.name)); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, n := range []string{"l1-a", "l1-b", "l2-a"} {
			_ = d.DeleteVM(context.Background(), hypervisor.VM{Name: n})
		}
	}()
	l1, err := d.ListVMs(ctx, "lab-l1")
	if err != nil {
		t.Fatal(err)
	}
	if len(l1) != 2 || l1[0].Name != "l1-a" || l1[1].Name != "l1-b" {
		t.Errorf("ListVMs(lab-l1) = %+v", l1)
	}
	all, _ := d.ListVMs(ctx, "")
	names := map[string]bool{}
	for _, v := range all {
		names[v.Name] = true
	}
	if !names["l1-a"] || !names["l2-a"] || names["test"] {
		t.Errorf("ListVMs(all) = %v; want labctl's VMs and not the test driver's own domain \"test\"", names)
	}

	// The test driver's built-in domain "test" is not labctl's.
	if _, err := d.FindVM(ctx, "lab-l1", "test"); err == nil || !strings.Contains(err.Error(), "labctl did not create it") {
		t.Errorf("FindVM(test) = %v", err)
	}
	if err := d.DeleteVM(ctx, hypervisor.VM{Name: "test"}); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("DeleteVM(test) = %v, want a refusal", err)
	}
	// Another lab's VM is neither found nor deleted through this lab.
	if _, err := d.FindVM(ctx, "lab-l1", "l2-a"); err == nil || !strings.Contains(err.Error(), "belongs to lab") {
		t.Errorf("FindVM across labs = %v", err)
	}
	if err := d.DeleteVM(ctx, hypervisor.VM{Name: "l2-a", Lab: "lab-l1"}); err == nil {
		t.Error("DeleteVM across labs succeeded")
	}
}

// TestCreateVMInterruptedConverges cancels CreateVM after each of its
// steps, then re-runs it: one VM, its two volumes, nothing else.
func TestCreateVMInterruptedConverges(t *testing.T) {
	d, _ := newTestDriver(t, testOptions(t))
	spec := vmSpec(t, d, "lab-i", "vm-int")
	base := len(volumeNames(t, d)) // the image and its marker
	for _, stage := range []string{"disk created", "seed uploaded", "defined"} {
		ctx, cancel := context.WithCancel(t.Context())
		d.stage = func(s string) {
			if s == stage {
				cancel()
			}
		}
		_, err := d.CreateVM(ctx, spec)
		d.stage = nil
		if stage != "defined" && !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel at %q: err = %v", stage, err)
		}
		if stage != "defined" {
			if n := len(volumeNames(t, d)); n != base {
				t.Fatalf("cancel at %q left volumes: %v", stage, volumeNames(t, d))
			}
		}
		if _, err := d.CreateVM(t.Context(), spec); err != nil {
			t.Fatalf("re-run after cancel at %q: %v", stage, err)
		}
		vms, err := d.ListVMs(t.Context(), "lab-i")
		if err != nil || len(vms) != 1 {
			t.Fatalf("after cancel at %q and a re-run: %+v, %v; want one VM", stage, vms, err)
		}
		if n := len(volumeNames(t, d)); n != base+2 {
			t.Fatalf("after cancel at %q: volumes %v", stage, volumeNames(t, d))
		}
		if err := d.DeleteVM(t.Context(), vms[0]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCreateVMRejectsBadSpecs(t *testing.T) {
	d, _ := newTestDriver(t, testOptions(t))
	good := vmSpec(t, d, "lab-b", "vm-b")
	for name, mod := range map[string]func(*hypervisor.VMSpec){
		"bad name":     func(s *hypervisor.VMSpec) { s.Name = "VM_B" },
		"no image":     func(s *hypervisor.VMSpec) { s.Image.Volume = "" },
		"no user-data": func(s *hypervisor.VMSpec) { s.CloudInit.UserData = nil },
		"tiny disk":    func(s *hypervisor.VMSpec) { s.DiskGiB = 1 }, // the image is 2 GiB
		"no lab":       func(s *hypervisor.VMSpec) { s.Lab = "" },
	} {
		s := good
		mod(&s)
		if _, err := d.CreateVM(t.Context(), s); err == nil {
			t.Errorf("%s: CreateVM accepted it", name)
		}
	}
	if vms, _ := d.ListVMs(t.Context(), "lab-b"); len(vms) != 0 {
		t.Errorf("rejected specs left VMs: %+v", vms)
	}
}

// The Cluster API provider names the domain's UUID (its LibvirtMachine's
// UID), its instance-id, and asks for data disks; DeleteVM takes them all.
func TestCreateVMWithUUIDAndDataDisks(t *testing.T) {
	ctx := t.Context()
	d, up := newTestDriver(t, testOptions(t))
	spec := vmSpec(t, d, "lab-u", "vm-uuid")
	spec.UUID = "0b6f2a52-4f0e-4c55-9a0e-3d3b7e1f0a11"
	spec.CloudInit.InstanceID = spec.UUID
	spec.ExtraDisksGiB = []int{2, 3}
	vm, err := d.CreateVM(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if vm.UUID != spec.UUID {
		t.Errorf("VM UUID %q, want %q", vm.UUID, spec.UUID)
	}
	dx, _ := storedDomain(t, d, "vm-uuid")
	var got []string
	for _, disk := range dx.Devices.Disks {
		got = append(got, disk.Target.Dev+"="+disk.Source.Volume.Volume)
	}
	want := []string{"vda=vm-uuid-disk0.qcow2", "vdb=vm-uuid-disk1.qcow2", "vdc=vm-uuid-disk2.qcow2", "sda=vm-uuid-seed.iso"}
	if !slices.Equal(got, want) {
		t.Errorf("disks %v, want %v", got, want)
	}
	p, _ := d.pool()
	v, err := d.l.StorageVolLookupByName(p, "vm-uuid-disk2.qcow2")
	if err != nil {
		t.Fatal(err)
	}
	if _, capacity, _, err := d.l.StorageVolGetInfo(v); err != nil || capacity != 3<<30 {
		t.Errorf("data disk 2 capacity %d (%v), want 3 GiB", capacity, err)
	}
	_, seed, err := sshtest.SeedFiles(up.get("vm-uuid-seed.iso"))
	if err != nil {
		t.Fatal(err)
	}
	if b := seed["meta-data"]; !strings.Contains(b, "instance-id: "+spec.UUID) {
		t.Errorf("meta-data %q lacks the instance-id", b)
	}
	if err := d.DeleteVM(ctx, vm); err != nil {
		t.Fatal(err)
	}
	for _, v := range volumeNames(t, d) {
		if strings.HasPrefix(v, "vm-uuid") {
			t.Errorf("volume %s left after DeleteVM", v)
		}
	}
}

// storedDomain is the domain's XML as libvirt stored it, decoded and raw.
func storedDomain(t *testing.T, d *Driver, name string) (libvirtxml.Domain, string) {
	t.Helper()
	dom, err := d.l.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := d.l.DomainGetXMLDesc(dom, 0)
	if err != nil {
		t.Fatal(err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	return dx, raw
}
