package doctor

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

// pveLab is the owner's lab pointed at the fake PVE server (which rejects
// any request the real PVE API schema would), pinned to its certificate.
func pveLab(t *testing.T, srv *pvetest.Server, edits ...string) string {
	t.Helper()
	home(t)
	t.Setenv("PVE_TOKEN_SECRET", srv.Secret)
	return labFile(t, append([]string{
		"url: https://192.168.0.8:8006", "url: " + srv.URL,
		"caFile: ~/.config/labctl/pve-root-ca.pem", "fingerprint: " + proxmox.Fingerprint(srv.Certificate()),
	}, edits...)...)
}

// owner's inventory: a stopped VM, a running one and the node template.
func ownerInventory(srv *pvetest.Server) {
	srv.AddVM("pv1-1", 110, "old-worker", 4096, false, false)
	srv.AddVM("pv1-1", 111, "build-host", 2048, true, false)
	srv.AddVM("pv1-1", 9000, "ubuntu-2404-kube", 8192, false, true, "labctl", "labctl-image-ubuntu-2404-kube")
}

func runPVE(t *testing.T, path, format string) (*Report, string, string) {
	t.Helper()
	io, _, out, errb := ui.Test()
	o := Options{IO: io, Output: format,
		LoadLab: load(config.Request{Path: path, Explicit: true}), Timeout: 5 * time.Second}
	r, _ := Run(context.Background(), o)
	return r, out.String(), errb.String()
}

func TestDoctorProxmoxMaxWorkersCountsStoppedVMs(t *testing.T) {
	srv := pvetest.New(t)
	ownerInventory(srv)
	path := pveLab(t, srv)
	r, out, _ := runPVE(t, path, "text")
	for _, name := range []string{"proxmox pve api", "proxmox pve privileges", "proxmox pve nodes", "proxmox pve storage pv1-1",
		"proxmox pve bridge pv1-1", "cluster lab1 template", "cluster lab1 memory"} {
		if c := check(t, r, name); c.Status != OK {
			t.Errorf("%s: %s %s", name, c.Status, c.Detail)
		}
	}
	// The storage type, and so the disk format image build picks, shows.
	if c := check(t, r, "proxmox pve storage pv1-1"); !strings.Contains(c.Detail, "local-lvm (lvmthin, raw disks) holds images") {
		t.Errorf("storage: %s", c.Detail)
	}
	// 29860 MiB × 160% = 47776; − 4096 stopped − 2048 running − 8192 for
	// the management VM to come = 33440; − 4096 control plane = 29344;
	// / 2048 per worker = 14.
	if !strings.Contains(out, "max workers that fit: 14 of 2.0 GiB (workers.max 5)") || !strings.Contains(out, "1 stopped VMs count too") {
		t.Errorf("text output:\n%s", out)
	}
	_, js, _ := runPVE(t, path, "json")
	var rep Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Capacity) != 1 || rep.Capacity[0].MaxWorkers != 14 || rep.Capacity[0].Nodes[0].ReservedMiB != 14336 {
		t.Errorf("json capacity: %+v", rep.Capacity)
	}
	for _, req := range srv.Requests() {
		if req.Write() {
			t.Errorf("doctor wrote: %s %s", req.Method, req.Raw)
		}
	}
}

func TestDoctorProxmoxStoppedVMsBelowMax(t *testing.T) {
	srv := pvetest.New(t)
	ownerInventory(srv)
	for id := 120; id < 123; id++ {
		srv.AddVM("pv1-1", id, "stopped-big", 8192, false, false)
	}
	r, out, _ := runPVE(t, pveLab(t, srv), "text")
	c := check(t, r, "cluster lab1 memory")
	// 33440 − 3 × 8192 = 8864; − 4096 = 4768; / 2048 = 2.
	if c.Status != Fail || !strings.Contains(c.Detail, "max workers that fit: 2 ") || !strings.Contains(c.Detail, "lower clusters[lab1].workers.max to 2") ||
		!strings.Contains(c.Detail, "4 stopped VMs count too") {
		t.Errorf("%s %s", c.Status, c.Detail)
	}
	if !strings.Contains(out, "max workers that fit: 2") {
		t.Errorf("not printed:\n%s", out)
	}
}

func TestDoctorProxmoxMissingPrivileges(t *testing.T) {
	srv := pvetest.New(t)
	ownerInventory(srv)
	privs := slices.DeleteFunc(pvetest.AllPrivileges(), func(p string) bool { return p == "VM.Allocate" || p == "VM.Clone" || p == "SDN.Use" })
	srv.SetPrivileges("/", privs...)
	r, _, _ := runPVE(t, pveLab(t, srv), "text")
	c := check(t, r, "proxmox pve privileges")
	for _, want := range []string{"lacks 3", "/vms VM.Allocate (labctl, CAPMOX)", "/vms VM.Clone (CAPMOX)", "/sdn/zones/localnetwork/vmbr0 SDN.Use (labctl, CAPMOX)", "pveum acl modify"} {
		if c.Status != Fail || !strings.Contains(c.Detail, want) {
			t.Errorf("want %q in %s %s", want, c.Status, c.Detail)
		}
	}
}

func TestDoctorProxmoxStorageBridgeTemplate(t *testing.T) {
	srv := pvetest.New(t)
	srv.SetStorageContent("pv1-1", "local", "iso", "vztmpl")
	r, _, _ := runPVE(t, pveLab(t, srv, "bridge: vmbr0", "bridge: vmbr9"), "text")
	if c := check(t, r, "proxmox pve storage pv1-1"); c.Status != Fail || !strings.Contains(c.Detail, "storage local lacks content import: pvesm set local --content iso,vztmpl,import") {
		t.Errorf("storage: %s %s", c.Status, c.Detail)
	}
	if c := check(t, r, "proxmox pve bridge pv1-1"); c.Status != Fail || !strings.Contains(c.Detail, "bridge vmbr9 does not exist on pv1-1 (it has vmbr0)") {
		t.Errorf("bridge: %s %s", c.Status, c.Detail)
	}
	if c := check(t, r, "cluster lab1 template"); c.Status != Fail || !strings.Contains(c.Detail, "labctl image build ubuntu-2404-kube") {
		t.Errorf("template: %s %s", c.Status, c.Detail)
	}
}

func TestDoctorProxmoxTokenAndTLS(t *testing.T) {
	srv := pvetest.New(t)
	path := pveLab(t, srv)
	t.Setenv("PVE_TOKEN_SECRET", "wrong-secret-value")
	r, out, errOut := runPVE(t, path, "text")
	if c := check(t, r, "proxmox pve api"); c.Status != Fail || !strings.Contains(c.Detail, "token root@pam!labctl was refused (401)") {
		t.Errorf("bad token: %s %s", c.Status, c.Detail)
	}
	if strings.Contains(out+errOut, "wrong-secret-value") {
		t.Error("the secret was printed")
	}
	path = labFile(t, "url: https://192.168.0.8:8006", "url: "+srv.URL,
		"caFile: ~/.config/labctl/pve-root-ca.pem", "fingerprint: "+strings.Repeat("AB:", 31)+"AB")
	r, _, _ = runPVE(t, path, "text")
	if c := check(t, r, "proxmox pve api"); c.Status != Fail || !strings.Contains(c.Detail, "the certificate is not the pinned one") ||
		!strings.Contains(c.Detail, proxmox.Fingerprint(srv.Certificate())) {
		t.Errorf("pin mismatch: %s %s", c.Status, c.Detail)
	}
}

// TestDoctorProxmoxSilentAPI: a Proxmox URL that accepts TCP and never
// answers fails the api check after one bounded attempt (not every retry
// of every check), naming the URL, what happened and what to check.
func TestDoctorProxmoxSilentAPI(t *testing.T) {
	srv := pvetest.New(t)
	hung := testbed.StartSilent(t)
	path := pveLab(t, srv, "url: "+srv.URL, "url: https://"+hung.Addr)
	io, _, _, _ := ui.Test()
	r, _ := Run(t.Context(), Options{IO: io, Output: "text",
		LoadLab: load(config.Request{Path: path, Explicit: true}), Timeout: time.Second})
	c := check(t, r, "proxmox pve api")
	for _, want := range []string{"Proxmox API https://" + hung.Addr, "did not answer within 1s", "check that the URL names the PVE API"} {
		if c.Status != Fail || !strings.Contains(c.Detail, want) {
			t.Errorf("want %q in %s %s", want, c.Status, c.Detail)
		}
	}
	if n := hung.Conns(); n != 1 {
		t.Errorf("doctor connected %d times to a silent API, want 1", n)
	}
}

// TestDoctorProxmoxPrintsFingerprintToPin: with neither a CA nor a pin, the
// self-signed certificate fails, and doctor prints its SHA-256 fingerprint
// in the form tls.fingerprint takes.
func TestDoctorProxmoxPrintsFingerprintToPin(t *testing.T) {
	srv := pvetest.New(t)
	path := pveLab(t, srv, "fingerprint: "+proxmox.Fingerprint(srv.Certificate()), "fingerprint: \"\"")
	r, _, _ := runPVE(t, path, "text")
	c := check(t, r, "proxmox pve api")
	if c.Status != Fail || !strings.Contains(c.Detail, "SHA-256 fingerprint "+proxmox.Fingerprint(srv.Certificate())) || !strings.Contains(c.Detail, "tls.fingerprint") {
		t.Errorf("unpinned self-signed certificate: %s %s", c.Status, c.Detail)
	}
}

// Every pool of a cluster on the hypervisor takes its memory: the second
// pool fits in what the control plane and the first pool, at its max,
// leave.
func TestFitReadsEveryPool(t *testing.T) {
	h := config.Hypervisor{Name: "pve", Proxmox: &config.Proxmox{Nodes: []config.PVENode{{Name: "pv1-1"}}}}
	lab := &config.Lab{Hypervisors: []config.Hypervisor{h}, Management: config.Management{Hypervisor: "elsewhere"}}
	c := config.Cluster{Name: "lab1", Hypervisor: "pve", MemoryAdjustment: 100,
		ControlPlane: config.ControlPlane{Replicas: 1, Size: config.Size{Memory: "4Gi"}},
		Pools: []config.Pool{
			{Name: "small", Hypervisors: []string{"pve"}, Max: 3, Size: config.Size{Memory: "2Gi"}},
			{Name: "kvm", Hypervisors: []string{"kvm1"}, Max: 9, Size: config.Size{Memory: "64Gi"}},
			{Name: "big", Hypervisors: []string{"pve"}, Max: 3, Size: config.Size{Memory: "4Gi"}},
		}}
	caps := []hypervisor.NodeCapacity{{Node: "pv1-1", MemoryMiB: 20480}}
	// 20480 − 4096 control plane = 16384: 8 small workers fit; after the
	// small pool's 3, 10240 is left: 2 big workers, not 3.
	f := Fit(lab, h, c, caps, nil)
	want := []PoolFit{{Pool: "small", WorkerMiB: 2048, WantMaxWorkers: 3, MaxWorkers: 8}, {Pool: "big", WorkerMiB: 4096, WantMaxWorkers: 3, MaxWorkers: 2}}
	if !slices.Equal(f.Pools, want) {
		t.Errorf("pools = %+v, want %+v (the KVM pool takes no Proxmox memory)", f.Pools, want)
	}
	r := &Report{}
	r.checkFit(lab, h, c, caps, nil)
	if ch := check(t, r, "cluster lab1 memory"); ch.Status != Fail || !strings.Contains(ch.Detail, "lower clusters[lab1].pools[big].max to 2") ||
		!strings.Contains(ch.Detail, "max workers that fit: 8 of 2.0 GiB (pool small max 3)") {
		t.Errorf("%s %s", ch.Status, ch.Detail)
	}
}
