package proxmox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// The scenario below is the Proxmox half of 'labctl mgmt up' as the
// hypervisor-neutral use case (internal/mgmt, issue 5) drives it: each
// step looks at the real state first. It runs against the strict fake PVE
// so the request counts, the interrupt and fault behaviour are the
// driver's own.

const k3sKubeconfig = "/etc/rancher/k3s/k3s.yaml"

type upStep struct {
	name string
	run  func(context.Context) error
}

type scenario struct {
	d          *Driver
	srv        *pvetest.Server
	spec       hypervisor.VMSpec
	kubeconfig string // where the kubeconfig is stored
	vm         hypervisor.VM
}

func newScenario(t *testing.T, srv *pvetest.Server) *scenario {
	d, _ := newDriver(t, srv, hv(srv))
	srv.ServeURL(imageURL, imageBytes)
	if srv.Secret == "" {
		t.Fatal("no secret")
	}
	return &scenario{d: d, srv: srv, spec: mgmtSpec(hypervisor.Image{}, 0), kubeconfig: filepath.Join(t.TempDir(), "home", "mgmt.kubeconfig")}
}

func (s *scenario) steps() []upStep {
	return []upStep{
		{"cloud image", func(ctx context.Context) error {
			img, err := s.d.EnsureImage(ctx, hypervisor.ImageSpec{Node: "pv1-1", URL: imageURL, Checksum: "sha256:" + imageSum()})
			s.spec.Image = img
			return err
		}},
		{"management VM", func(ctx context.Context) error {
			vm, err := s.d.FindVM(ctx, s.spec.Lab, s.spec.Name)
			if errors.Is(err, hypervisor.ErrNotFound) {
				vm, err = s.d.CreateVM(ctx, s.spec)
			}
			s.vm = vm
			return err
		}},
		{"start", func(ctx context.Context) error { return s.d.StartVM(ctx, s.vm) }},
		{"address", func(ctx context.Context) error {
			ip, err := s.d.WaitAddress(ctx, s.vm)
			if err == nil && ip.String() != "192.168.4.21" {
				err = fmt.Errorf("address %s", ip)
			}
			return err
		}},
		{"kubeconfig", func(ctx context.Context) error {
			data, err := s.d.ReadFile(ctx, s.vm, k3sKubeconfig)
			if err != nil {
				return err
			}
			if old, err := os.ReadFile(s.kubeconfig); err == nil && bytes.Equal(old, data) {
				return nil
			}
			if err := os.MkdirAll(filepath.Dir(s.kubeconfig), 0o700); err != nil {
				return err
			}
			return os.WriteFile(s.kubeconfig, data, 0o600)
		}},
	}
}

func (s *scenario) up(ctx context.Context) error {
	for _, st := range s.steps() {
		if err := st.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return nil
}

func serveKubeconfig(srv *pvetest.Server, data []byte) {
	srv.OnFileRead(func(v *pvetest.VM, p string) ([]byte, bool) { return data, p == k3sKubeconfig })
}

// labctlVMs asserts there is at most one VM of lab home, tagged, and
// returns how many.
func labctlVMs(t *testing.T, srv *pvetest.Server) int {
	t.Helper()
	n := 0
	for _, v := range srv.VMs() {
		tags := strings.Join(v.Tags(), ";")
		switch {
		case tags == "labctl;labctl-lab-home":
			n++
		case strings.HasPrefix(v.Name(), "racer-"), v.ID < 200:
		default:
			t.Errorf("orphan VM %d %q tags %q", v.ID, v.Name(), tags)
		}
	}
	if n > 1 {
		t.Errorf("%d management VMs", n)
	}
	return n
}

func TestMgmtUpOnceThenNothing(t *testing.T) {
	srv := pvetest.New(t)
	serveKubeconfig(srv, []byte("apiVersion: v1\nkind: Config\n"))
	s := newScenario(t, srv)
	if err := s.up(ctx(t)); err != nil {
		t.Fatal(err)
	}
	reqs, polls := srv.Requests(), 0
	for _, r := range reqs {
		if r.Path == "/nodes/{node}/tasks/{upid}/status" || r.Path == "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces" {
			polls++
		}
	}
	writes := srv.Writes()
	t.Logf("first mgmt up (Proxmox part): %d PVE requests: %d writes, %d other reads, %d polls of tasks and the guest agent",
		len(reqs), writes, len(reqs)-writes-polls, polls)
	// Writes: download-url, upload, create, resize, start. Reads: import
	// content, running downloads, iso content, cluster resources twice (find,
	// free VMID), VM status, file-read.
	if writes != 5 || len(reqs)-writes-polls != 7 {
		t.Errorf("want 5 writes and 7 other reads")
	}
	if labctlVMs(t, srv) != 1 {
		t.Fatal("no management VM")
	}
	if fi, err := os.Stat(s.kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v %v", fi, err)
	}
	srv.ResetRequests()
	if err := s.up(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if w := srv.Writes(); w != 0 {
		t.Errorf("second run made %d writes: %+v", w, srv.Requests())
	}
	t.Logf("second mgmt up: %d PVE requests, 0 writes", len(srv.Requests()))
}

// BenchmarkMgmtUpRequests reports the PVE requests of one mgmt up (the
// Proxmox part): go test -bench MgmtUpRequests -run '^$' ./internal/hypervisor/proxmox
func BenchmarkMgmtUpRequests(b *testing.B) {
	for b.Loop() {
		srv := pvetest.New(b)
		serveKubeconfig(srv, []byte("apiVersion: v1\n"))
		var buf bytes.Buffer
		// Production timing: polls start at 50 ms and double.
		o := fastOptions(b, srv, &buf)
		o.Backoff, o.MaxBackoff, o.Verbose = 0, 0, 0
		d, err := newFor(hv(srv), o)
		if err != nil {
			b.Fatal(err)
		}
		srv.ServeURL(imageURL, imageBytes)
		s := &scenario{d: d, srv: srv, spec: mgmtSpec(hypervisor.Image{}, 0), kubeconfig: filepath.Join(b.TempDir(), "k")}
		if err := s.up(context.Background()); err != nil {
			b.Fatal(err)
		}
		polls := 0
		for _, r := range srv.Requests() {
			if r.Path == "/nodes/{node}/tasks/{upid}/status" || r.Path == "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces" {
				polls++
			}
		}
		b.ReportMetric(float64(len(srv.Requests())), "pve-requests/op")
		b.ReportMetric(float64(polls), "pve-polls/op")
		b.ReportMetric(float64(srv.Writes()), "pve-writes/op")
	}
}

// TestMgmtUpInterruptedConverges cancels the run at every single request
// of a full run, then re-runs: it always ends with exactly one VM.
func TestMgmtUpInterruptedConverges(t *testing.T) {
	probe := pvetest.New(t, pvetest.WithTaskDelay(5*time.Millisecond), pvetest.WithAgentDelay(5*time.Millisecond))
	serveKubeconfig(probe, []byte("k"))
	if err := newScenario(t, probe).up(ctx(t)); err != nil {
		t.Fatal(err)
	}
	total := len(probe.Requests())
	for cut := 1; cut < total; cut++ {
		t.Run(fmt.Sprintf("cancel-at-request-%d", cut), func(t *testing.T) {
			srv := pvetest.New(t, pvetest.WithTaskDelay(5*time.Millisecond), pvetest.WithAgentDelay(5*time.Millisecond))
			serveKubeconfig(srv, []byte("k"))
			s := newScenario(t, srv)
			c, cancel := context.WithCancel(ctx(t))
			n := 0
			srv.OnRequest(func(pvetest.Request) {
				if n++; n == cut {
					cancel()
				}
			})
			err := s.up(c)
			srv.OnRequest(nil)
			if err == nil && cut < total-1 {
				t.Logf("finished although cancelled at request %d", cut)
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run: %v", err)
			}
			if err := s.up(ctx(t)); err != nil {
				t.Fatalf("re-run: %v", err)
			}
			if labctlVMs(t, srv) != 1 {
				t.Error("re-run did not converge to one VM")
			}
			srv.ResetRequests()
			if err := s.up(ctx(t)); err != nil || srv.Writes() != 0 {
				t.Errorf("third run: %v, %d writes", err, srv.Writes())
			}
		})
	}
}

func TestMgmtUpFaults(t *testing.T) {
	cases := []struct {
		name    string
		inject  func(*pvetest.Server)
		wantErr string // "" means the run retries and succeeds
	}{
		{"500 on every read once", func(s *pvetest.Server) {
			for _, p := range []string{"/nodes/{node}/storage/{storage}/content", "/cluster/resources", "/nodes/{node}/tasks/{upid}/status",
				"/nodes/{node}/qemu/{vmid}/status/current", "/nodes/{node}/qemu/{vmid}/agent/file-read"} {
				s.FailRequests("GET", p, 1, 500)
			}
		}, ""},
		{"502 on POSTs", func(s *pvetest.Server) {
			s.FailRequests("POST", "/nodes/{node}/qemu", 2, 502)
			s.FailRequests("POST", "/nodes/{node}/qemu/{vmid}/status/start", 1, 503)
		}, ""},
		{"timeouts", func(s *pvetest.Server) {
			s.HangRequests("GET", "/cluster/resources", 1)
			s.HangRequests("GET", "/nodes/{node}/tasks/{upid}/status", 1)
		}, ""},
		{"VMID collisions", func(s *pvetest.Server) { s.CollideVMIDs(3) }, ""},
		{"500 on create", func(s *pvetest.Server) { s.FailRequests("POST", "/nodes/{node}/qemu", 1, 500) }, "creating VM"},
		{"failed download", func(s *pvetest.Server) {
			s.FailTasks("POST", "/nodes/{node}/storage/{storage}/download-url", 1, "download failed: 503 Service Unavailable")
		}, "download failed"},
		{"failed create task", func(s *pvetest.Server) {
			s.FailTasks("POST", "/nodes/{node}/qemu", 1, "unable to create VM - import failed")
		}, "import failed"},
		{"failed start task", func(s *pvetest.Server) {
			s.FailTasks("POST", "/nodes/{node}/qemu/{vmid}/status/start", 1, "start failed: QEMU exited with code 1")
		}, "QEMU exited"},
		{"failed resize", func(s *pvetest.Server) {
			s.FailTasks("PUT", "/nodes/{node}/qemu/{vmid}/resize", 1, "lvextend failed: out of space")
		}, "out of space"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := pvetest.New(t)
			serveKubeconfig(srv, []byte("k"))
			s := newScenario(t, srv)
			s.d.hc.Transport.(*retryTransport).timeout = 300 * time.Millisecond
			tc.inject(srv)
			err := s.up(ctx(t))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want a retry and success, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error with %q, got %v", tc.wantErr, err)
			}
			if tc.wantErr != "" {
				if n := labctlVMs(t, srv); n != 0 && !strings.Contains(tc.name, "start") {
					t.Errorf("a failed create left %d VMs", n)
				}
				if err := s.up(ctx(t)); err != nil {
					t.Fatalf("re-run after the fault: %v", err)
				}
			}
			if labctlVMs(t, srv) != 1 {
				t.Error("not exactly one management VM")
			}
		})
	}
}

func TestMgmtDownOnlyThisLabsVMs(t *testing.T) {
	srv := pvetest.New(t)
	serveKubeconfig(srv, []byte("k"))
	srv.AddVM("pv1-1", 150, "hand-made", 1024, true, false)
	srv.AddVM("pv1-1", 151, "other-lab-mgmt", 1024, true, false, "labctl", "labctl-lab-work")
	s := newScenario(t, srv)
	if err := s.up(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// mgmt down: every labctl VM of this lab, stop, wait, delete with purge.
	vms, err := s.d.ListVMs(ctx(t), "home")
	if err != nil || len(vms) != 1 {
		t.Fatalf("ListVMs: %+v %v", vms, err)
	}
	for _, v := range vms {
		if err := s.d.DeleteVM(ctx(t), v); err != nil {
			t.Fatal(err)
		}
	}
	left := srv.VMs()
	if len(left) != 2 || left[0].ID != 150 || !left[0].Running || left[1].ID != 151 || !left[1].Running {
		t.Errorf("left: %+v", left)
	}
	if vms, _ := s.d.ListVMs(ctx(t), "home"); len(vms) != 0 {
		t.Errorf("labctl VMs left: %+v", vms)
	}
	var del []string
	for _, r := range srv.Requests() {
		if r.Method == "DELETE" && strings.Contains(r.Raw, "/qemu/") {
			del = append(del, r.Raw)
		}
	}
	if len(del) != 1 || !strings.Contains(del[0], "purge=1") {
		t.Errorf("deletes: %v", del)
	}
}

// TestKubeconfigThroughGuestAgentReachesTestbed: the fake VM's guest agent
// hands out the kubeconfig of the real test bed API server; what labctl
// stores from it reaches that server.
func TestKubeconfigThroughGuestAgentReachesTestbed(t *testing.T) {
	env := testbed.Start(t)
	data, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	srv := pvetest.New(t)
	serveKubeconfig(srv, data)
	s := newScenario(t, srv)
	if err := s.up(ctx(t)); err != nil {
		t.Fatal(err)
	}
	c, err := kube.Connect(s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.ServerVersion(ctx(t))
	if err != nil || v.GitVersion != "v1.35.4" {
		t.Fatalf("server version %v, %v", v, err)
	}
}
