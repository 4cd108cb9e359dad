package proxmox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/pvetest"
)

// The fake PVE server rejects any request the real PVE 9 API schema
// (../shared/pve/apidoc.json) would reject and fails the test on it; see
// package pvetest.

func TestEnsureImageDownloadsOnceWithChecksum(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	want := "local:import/noble-server-cloudimg-amd64-" + imageSum()[:12] + ".qcow2"
	if img.Volume != want {
		t.Fatalf("volume %q, want %q", img.Volume, want)
	}
	if got := srv.Volumes("pv1-1", "local"); len(got) != 1 || got[0] != want {
		t.Fatalf("storage holds %v", got)
	}
	srv.ResetRequests()
	if _, err := d.EnsureImage(ctx(t), hypervisor.ImageSpec{Node: "pv1-1", URL: imageURL, Checksum: "sha256:" + imageSum()}); err != nil {
		t.Fatal(err)
	}
	if w := srv.Writes(); w != 0 || len(srv.Requests()) != 1 {
		t.Errorf("second EnsureImage: %d requests, %d writes; want 1 read, 0 writes", len(srv.Requests()), w)
	}
}

func TestEnsureImageChecksumMismatchFailsWithTaskLog(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	srv.ServeURL(imageURL, []byte("tampered"))
	_, err := d.EnsureImage(ctx(t), hypervisor.ImageSpec{Node: "pv1-1", URL: imageURL, Checksum: "sha256:" + imageSum()})
	var te *TaskError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), "task log") ||
		!strings.Contains(err.Error(), "downloading "+imageURL) {
		t.Fatalf("err = %v", err)
	}
	if v := srv.Volumes("pv1-1", "local"); len(v) != 0 {
		t.Errorf("a failed download left %v", v)
	}
}

func TestCreateVMConfig(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	vm, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err != nil {
		t.Fatal(err)
	}
	if vm.ID != 201 || vm.Node != "pv1-1" {
		t.Fatalf("vm = %+v", vm)
	}
	vms := srv.VMs()
	if len(vms) != 1 || vms[0].Running {
		t.Fatalf("server VMs: %+v", vms)
	}
	cfg := vms[0].Config
	for k, want := range map[string]string{
		"scsi0":     "local-lvm:vm-201-disk-0,discard=on,iothread=1,size=40G",
		"ide2":      "local-lvm:vm-201-cloudinit,media=cdrom",
		"agent":     "enabled=1",
		"tags":      "labctl;labctl-lab-home",
		"ipconfig0": "ip=192.168.4.21/24,gw=192.168.4.1",
		"ciuser":    "ubuntu",
		"sshkeys":   "ssh-ed25519%20AAAAC3Nza%20labctl%40test",
		"net0":      "virtio,bridge=vmbr0,tag=4",
		"memory":    "8192",
		"citype":    "configdrive2",
	} {
		if cfg[k] != want {
			t.Errorf("%s = %q, want %q", k, cfg[k], want)
		}
	}
	if !strings.HasPrefix(cfg["ide3"], "local:iso/labctl-home-labctl-mgmt-") || !strings.HasSuffix(cfg["ide3"], ".iso,media=cdrom") {
		t.Errorf("ide3 = %q, want the seed ISO", cfg["ide3"])
	}
	found, err := d.FindVM(ctx(t), "home", "labctl-mgmt")
	if err != nil || found.ID != 201 || found.MemoryMiB != 8192 || found.Lab != "home" {
		t.Fatalf("FindVM = %+v, %v", found, err)
	}
	if _, err := d.FindVM(ctx(t), "other", "labctl-mgmt"); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("FindVM of another lab: %v", err)
	}
}

func TestCreateVMPicksFreeIDAndRetriesCollisions(t *testing.T) {
	srv := pvetest.New(t)
	srv.AddVM("pv1-1", 200, "someone-elses", 1024, true, false)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	srv.CollideVMIDs(2) // 201 and 202 are taken by a racing client
	vm, err := d.CreateVM(ctx(t), mgmtSpec(img, 0))
	if err != nil {
		t.Fatal(err)
	}
	if vm.ID != 203 {
		t.Errorf("VMID %d, want 203 (200 used, 201 and 202 lost to races)", vm.ID)
	}
	labctl, _ := d.ListVMs(ctx(t), "home")
	if len(labctl) != 1 {
		t.Errorf("labctl VMs: %+v, want exactly one", labctl)
	}
}

func TestCreateVMFixedIDTakenIsClearError(t *testing.T) {
	srv := pvetest.New(t)
	srv.AddVM("pv1-1", 201, "not-ours", 1024, false, false)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	_, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err == nil || !strings.Contains(err.Error(), "VMID 201 is already taken") || !strings.Contains(err.Error(), "management.vmid") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.VMs()); n != 1 {
		t.Errorf("%d VMs, want only the foreign one", n)
	}
}

func TestCreateVMFailedTaskCarriesLogAndLeavesNothing(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	srv.FailTasks("POST", "/nodes/{node}/qemu", 1, "unable to create VM 201 - lvcreate 'pve/vm-201-disk-0' error: out of space")
	_, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err == nil || !strings.Contains(err.Error(), "out of space") || !strings.Contains(err.Error(), "TASK ERROR") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.VMs()); n != 0 {
		t.Errorf("%d VMs after a failed create", n)
	}
}

func TestCreateVMPost500IsClearErrorAndNoVM(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	srv.FailRequests("POST", "/nodes/{node}/qemu", 1, 500)
	_, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err == nil || !strings.Contains(err.Error(), "creating VM 201 (labctl-mgmt) on node pv1-1") {
		t.Fatalf("err = %v", err)
	}
	if n := len(srv.VMs()); n != 0 {
		t.Errorf("%d VMs", n)
	}
	// Re-running converges.
	if _, err := d.CreateVM(ctx(t), mgmtSpec(img, 201)); err != nil {
		t.Fatal(err)
	}
}

func TestCreateVMCancelledLeavesNoHalfVM(t *testing.T) {
	srv := pvetest.New(t, pvetest.WithTaskDelay(300*time.Millisecond))
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	c, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
	defer cancel()
	_, err := d.CreateVM(c, mgmtSpec(img, 201))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if vms := srv.VMs(); len(vms) != 0 {
		t.Errorf("VMs left after a cancelled create: %+v", vms)
	}
}

func TestRetriesOn500AndTimeouts(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	srv.FailRequests("GET", "/cluster/resources", 2, 500)
	if _, err := d.ListVMs(ctx(t), "home"); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d requests, want 3 (two 500s, then success)", n)
	}
	srv.ResetRequests()
	d.o.Timeout = 150 * time.Millisecond
	d.hc.Transport.(*retryTransport).timeout = 150 * time.Millisecond
	srv.HangRequests("GET", "/cluster/resources", 1)
	if _, err := d.ListVMs(ctx(t), "home"); err != nil {
		t.Fatal(err)
	}
	srv.FailRequests("GET", "/cluster/resources", 10, 503)
	_, err := d.ListVMs(ctx(t), "home")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "listing the cluster's resources") {
		t.Errorf("after 4 tries: %v", err)
	}
}

func TestStartWaitAddressReadFile(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	vm, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err != nil {
		t.Fatal(err)
	}
	srv.OnFileRead(func(v *pvetest.VM, p string) ([]byte, bool) {
		return []byte("kubeconfig of " + v.Name()), p == "/etc/rancher/k3s/k3s.yaml"
	})
	if _, err := d.ReadFile(ctx(t), vm, "/etc/rancher/k3s/k3s.yaml"); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("file-read on a stopped VM: %v", err)
	}
	if err := d.StartVM(ctx(t), vm); err != nil {
		t.Fatal(err)
	}
	if err := d.StartVM(ctx(t), vm); err != nil {
		t.Fatalf("starting a running VM: %v", err)
	}
	ip, err := d.WaitAddress(ctx(t), vm)
	if err != nil || ip.String() != "192.168.4.21" {
		t.Fatalf("address %v, %v", ip, err)
	}
	data, err := d.ReadFile(ctx(t), vm, "/etc/rancher/k3s/k3s.yaml")
	if err != nil || string(data) != "kubeconfig of labctl-mgmt" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
}

func TestDeleteVMOnlyLabctlTagged(t *testing.T) {
	srv := pvetest.New(t)
	srv.AddVM("pv1-1", 150, "hand-made", 2048, true, false)
	srv.AddVM("pv1-1", 151, "other-lab", 2048, false, false, "labctl", "labctl-lab-work")
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	vm, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartVM(ctx(t), vm); err != nil {
		t.Fatal(err)
	}
	err = d.DeleteVM(ctx(t), hypervisor.VM{ID: 150, Node: "pv1-1", Lab: "home"})
	if err == nil || !strings.Contains(err.Error(), "refusing to delete VM 150") {
		t.Fatalf("deleting a hand-made VM: %v", err)
	}
	if err := d.DeleteVM(ctx(t), hypervisor.VM{ID: 151, Node: "pv1-1", Lab: "home"}); err == nil {
		t.Fatal("deleted another lab's VM")
	}
	if err := d.DeleteVM(ctx(t), vm); err != nil {
		t.Fatal(err)
	}
	vms := srv.VMs()
	if len(vms) != 2 || vms[0].ID != 150 || vms[1].ID != 151 {
		t.Errorf("left: %+v", vms)
	}
	for _, v := range srv.Volumes("pv1-1", "local") {
		if strings.Contains(v, "iso/") {
			t.Errorf("seed ISO %s left behind", v)
		}
	}
	if v := srv.Volumes("pv1-1", "local-lvm"); len(v) != 0 {
		t.Errorf("disks left: %v", v)
	}
	if err := d.DeleteVM(ctx(t), vm); err != nil {
		t.Errorf("deleting a deleted VM: %v", err)
	}
}

func TestTaskOnOtherNodeIsPolledThere(t *testing.T) {
	srv := pvetest.New(t)
	srv.AddNode("pv1-2", 16000, 4, "vmbr0")
	h := hv(srv)
	h.Proxmox.Nodes = append(h.Proxmox.Nodes, h.Proxmox.Nodes[0])
	h.Proxmox.Nodes[1].Name = "pv1-2"
	d, _ := newDriver(t, srv, h)
	srv.ServeURL(imageURL, imageBytes)
	img, err := d.EnsureImage(ctx(t), hypervisor.ImageSpec{Node: "pv1-2", URL: imageURL, Checksum: "sha256:" + imageSum()})
	if err != nil {
		t.Fatal(err)
	}
	spec := mgmtSpec(img, 0)
	spec.Node = "pv1-2"
	if _, err := d.CreateVM(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.Requests() {
		if strings.Contains(r.Raw, "/tasks/") && !strings.Contains(r.Raw, "/nodes/pv1-2/tasks/UPID:pv1-2:") {
			t.Errorf("task polled on the wrong node: %s", r.Raw)
		}
	}
}

func TestCapacityCountsStoppedNotTemplates(t *testing.T) {
	srv := pvetest.New(t)
	srv.AddVM("pv1-1", 100, "running", 4096, true, false)
	srv.AddVM("pv1-1", 101, "stopped", 2048, false, false)
	srv.AddVM("pv1-1", 9000, "template", 8192, false, true)
	d, _ := newDriver(t, srv, hv(srv))
	caps, err := d.Capacity(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(caps) != 1 || caps[0].ReservedMiB != 6144 || caps[0].VMs != 2 || caps[0].RunningVMs != 1 || caps[0].MemoryMiB != 29860 {
		t.Fatalf("capacity %+v", caps)
	}
}

func TestWaitAddressReportsGuestOverride(t *testing.T) {
	srv := pvetest.New(t)
	srv.OnGuestAddress(func(*pvetest.VM) (string, bool) { return "127.0.0.1/8", true })
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	vm, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err == nil {
		err = d.StartVM(ctx(t), vm)
	}
	if err != nil {
		t.Fatal(err)
	}
	if ip, err := d.WaitAddress(ctx(t), vm); err != nil || ip.String() != "127.0.0.1" {
		t.Fatalf("%v %v", ip, err)
	}
}

func TestFindImageOnlyReads(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	spec := hypervisor.ImageSpec{Node: "pv1-1", URL: imageURL, Checksum: "sha256:" + imageSum()}
	if _, err := d.FindImage(ctx(t), spec); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Fatalf("before: %v", err)
	}
	img := ensureImage(t, d, srv)
	got, err := d.FindImage(ctx(t), spec)
	if err != nil || got != img {
		t.Fatalf("after: %+v %v", got, err)
	}
	srv.ResetRequests()
	_, _ = d.FindImage(ctx(t), spec)
	if srv.Writes() != 0 {
		t.Error("FindImage wrote")
	}
}

func TestSeedBuilderSeam(t *testing.T) {
	srv := pvetest.New(t)
	var buf bytes.Buffer
	o := fastOptions(t, srv, &buf)
	var got hypervisor.CloudInit
	o.Seed = func(_ string, ci hypervisor.CloudInit) ([]byte, error) {
		got = ci
		return fakeISO(string(ci.UserData)), nil
	}
	d, err := newFor(hv(srv), o)
	if err != nil {
		t.Fatal(err)
	}
	img := ensureImage(t, d, srv)
	spec := mgmtSpec(img, 201)
	spec.CloudInit.SeedISO, spec.CloudInit.UserData = nil, []byte("#cloud-config\nwrite_files: []\n")
	if _, err := d.CreateVM(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	iso := srv.VMs()[0].Config["ide3"]
	vol, _, _ := strings.Cut(iso, ",")
	data, ok := srv.Volume("pv1-1", "local", vol)
	if string(got.UserData) != string(spec.CloudInit.UserData) || !ok || !bytes.Contains(data, spec.CloudInit.UserData) {
		t.Errorf("the seed built from user-data was not uploaded: %q %v", iso, ok)
	}
}

func TestDefaultSeedIsARealNoCloudISO(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	img := ensureImage(t, d, srv)
	spec := mgmtSpec(img, 201)
	spec.Network.MAC = "52:54:00:aa:bb:cc"
	spec.CloudInit.SeedISO = nil
	spec.CloudInit.UserData = []byte("#cloud-config\nhostname: labctl-mgmt\n")
	spec.CloudInit.NetworkConfig = []byte("version: 2\n")
	if _, err := d.CreateVM(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	cfg := srv.VMs()[0].Config
	if cfg["net0"] != "virtio=52:54:00:AA:BB:CC,bridge=vmbr0,tag=4" {
		t.Errorf("net0 = %q", cfg["net0"])
	}
	vol, _, _ := strings.Cut(cfg["ide3"], ",")
	data, ok := srv.Volume("pv1-1", "local", vol)
	if !ok || !bytes.Contains(data, []byte("hostname: labctl-mgmt")) || !bytes.Contains(data, []byte("CIDATA")) && !bytes.Contains(data, []byte("cidata")) {
		t.Errorf("seed ISO %s: found %v, %d bytes", vol, ok, len(data))
	}
}
