package mgmt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

// downBed is the owner's lab on the strict fake PVE: the management VM,
// a VM made by hand and another lab's VM. Down goes through drivers.Open,
// as the command factory's Driver does.
func downBed(t *testing.T) (*pvetest.Server, *config.Lab) {
	t.Helper()
	srv := pvetest.New(t, pvetest.WithAddr("127.0.0.2:0"), pveTLS(t))
	srv.AddVM("pv1-1", 150, "hand-made", 1024, true, false)
	srv.AddVM("pv1-1", 151, "labctl-mgmt", 1024, true, false, "labctl", "labctl-lab-work")
	srv.AddVM("pv1-1", 201, "labctl-mgmt", 8192, true, false, "labctl", "labctl-lab-home")
	p := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(p, proxmoxLabYAML(t, srv), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	lab, _, err := config.Load(t.Context(), config.Request{Path: p, Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	return srv, lab
}

// opener is the command factory's Driver for lab.
func opener(lab *config.Lab) DriverFunc {
	return func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }
}

// storedMgmt is the command factory's Mgmt without --kubeconfig: the
// kubeconfig mgmt up stored, or ErrNoManagement.
func storedMgmt(lab *config.Lab) func(context.Context) (*kube.Client, error) {
	return func(context.Context) (*kube.Client, error) {
		m, err := kube.OwnMgmtKubeconfig("", lab.Metadata.Name)
		if err != nil {
			return nil, err
		}
		return m.Connect()
	}
}

func down(t *testing.T, lab *config.Lab, answer string, dry, yes bool) (string, error) {
	io, out := answering(answer)
	err := Down(t.Context(), DownOptions{IO: io, Lab: lab, Driver: opener(lab), Mgmt: storedMgmt(lab), DryRun: dry, Yes: yes})
	return out.String(), err
}

// answering is a terminal on which answer is typed, with stdout and
// stderr in the one log out.
func answering(answer string) (*ui.IO, *bytes.Buffer) {
	io, in, out, _ := ui.Test()
	in.WriteString(answer)
	io.Err = out
	io.InTTY, io.ErrTTY = true, true
	return io, out
}

func ids(srv *pvetest.Server) []int {
	var out []int
	for _, v := range srv.VMs() {
		out = append(out, v.ID)
	}
	return out
}

func TestDownOnProxmox(t *testing.T) {
	srv, lab := downBed(t)
	out, err := down(t, lab, "", true, false)
	if err != nil || !strings.Contains(out, "labctl-mgmt (VMID 201 on pv1-1)") || !strings.Contains(out, "dry run") || len(srv.VMs()) != 3 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	stored, _ := kube.MgmtKubeconfigPath("home")
	if want := "workload clusters: none can exist (no kubeconfig at " + stored + ": mgmt up never finished"; !strings.Contains(out, want) {
		t.Errorf("the dry run does not say why it asked for no workload clusters; want %q:\n%s", want, out)
	}
	if out, err := down(t, lab, "n\n", false, false); !errors.Is(err, ErrAborted) || len(srv.VMs()) != 3 {
		t.Fatalf("answered no: %v %v\n%s", err, ids(srv), out)
	}
	out, err = down(t, lab, "y\n", false, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := ids(srv); len(got) != 2 || got[0] != 150 || got[1] != 151 {
		t.Errorf("left %v, want the hand-made VM and the other lab's", got)
	}
	for _, v := range srv.VMs() {
		if !v.Running {
			t.Errorf("VM %d was stopped", v.ID)
		}
	}
	var del int
	for _, r := range srv.Requests() {
		if r.Method == "DELETE" {
			del++
			if !strings.Contains(r.Raw, "/qemu/201?") || !strings.Contains(r.Raw, "purge=1") {
				t.Errorf("delete %s", r.Raw)
			}
		}
	}
	if del != 1 {
		t.Errorf("%d deletes", del)
	}
	if out, err := down(t, lab, "", false, true); err != nil || !strings.Contains(out, "nothing to delete") {
		t.Errorf("second down: %v\n%s", err, out)
	}
	if strings.Contains(out, srv.Secret) {
		t.Error("secret printed")
	}
}

func TestKubeconfigPrintAndWrite(t *testing.T) {
	_, lab := downBed(t)
	io, _, out, _ := ui.Test()
	io.Err = out
	if err := Kubeconfig(t.Context(), KubeconfigOptions{IO: io, Lab: lab}); err == nil || !strings.Contains(err.Error(), "run 'labctl mgmt up'") {
		t.Fatalf("nothing stored: %v", err)
	}
	stored, _ := kube.MgmtKubeconfigPath("home")
	if err := files.WritePrivate(stored, []byte("apiVersion: v1\nkind: Config\n")); err != nil {
		t.Fatal(err)
	}
	if err := Kubeconfig(t.Context(), KubeconfigOptions{IO: io, Lab: lab}); err != nil || out.String() != "apiVersion: v1\nkind: Config\n" {
		t.Fatalf("print: %v %q", err, out.String())
	}
	dst := filepath.Join(t.TempDir(), "lab.kubeconfig")
	if err := Kubeconfig(t.Context(), KubeconfigOptions{IO: io, Lab: lab, Path: dst}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("written: %v %v", fi, err)
	}
	if err := Kubeconfig(t.Context(), KubeconfigOptions{IO: io, Lab: lab, Path: dst}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("overwrite without --force: %v", err)
	}
}

// TestDownRefusesWhileClustersExist: with a workload cluster in the
// management cluster's Cluster API (the real CRDs on the test bed API
// server), mgmt down refuses and lists it; --cascade deletes it through
// Cluster API, waits until the VM its ProxmoxMachine names is gone from the
// fake PVE, and only then deletes the management VM. A VM that never goes
// keeps the management VM and is named.
func TestDownRefusesWhileClustersExist(t *testing.T) {
	srv, lab := downBed(t)
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox"))
	raw, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := kube.MgmtKubeconfigPath("home")
	if err := files.WritePrivate(stored, raw); err != nil {
		t.Fatal(err)
	}
	mc, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "lab1"}}}
	cl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": "lab1", "namespace": "lab1"},
		"spec":     map[string]any{"paused": false},
	}}
	// A worker's VM as CAPMOX clones it: the template's tags, not the lab's.
	srv.AddVM("pv1-1", 202, "lab1-workers-x7k2p", 4096, true, false, "labctl", "labctl-image-noble")
	// Its ProxmoxMachine, as CAPI makes it from the template labctl renders.
	example, _, err := config.Load(t.Context(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	example.Management.SSHPublicKeyFile, example.Management.SSHPublicKeys = "", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"}
	r, err := cluster.Render(example, "lab1", nil)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	for _, o := range r.Objects {
		if o.GroupVersionKind() == clusterapi.ProxmoxMachineTemplateGVK {
			spec, _, _ = unstructured.NestedMap(o.Object, "spec", "template", "spec")
		}
	}
	if spec == nil {
		t.Fatal("lab1 renders no ProxmoxMachineTemplate")
	}
	spec["virtualMachineID"] = int64(202)
	pm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": clusterapi.ProxmoxMachineGVK.GroupVersion().String(), "kind": "ProxmoxMachine",
		"metadata": map[string]any{"name": "lab1-workers-x7k2p", "namespace": "lab1", "labels": map[string]any{clusterapi.ClusterNameLabel: "lab1"}},
		"spec":     spec,
	}}
	if _, err := mc.Apply(t.Context(), []*unstructured.Unstructured{ns, cl, pm}, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	clRef := kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: "lab1", Name: "lab1"}
	timeout := 30 * time.Second
	run := func(answer string, dry, cascade bool) (string, error) {
		io, out := answering(answer)
		err := Down(t.Context(), DownOptions{IO: io, Lab: lab, Driver: opener(lab), Mgmt: storedMgmt(lab),
			DryRun: dry, Yes: answer == "", Cascade: cascade, Timeout: timeout})
		return out.String(), err
	}

	out, err := run("", false, false)
	if err == nil || !strings.Contains(err.Error(), "refusing to delete the management VM") || !strings.Contains(err.Error(), "Cluster lab1/lab1") ||
		!strings.Contains(err.Error(), "--cascade") {
		t.Fatalf("mgmt down with a workload cluster = %v\n%s", err, out)
	}
	if len(srv.VMs()) != 4 {
		t.Fatalf("a refused mgmt down deleted VMs: %v", ids(srv))
	}

	out, err = run("", true, true)
	if err != nil || !strings.Contains(out, "workload clusters to delete first") || !strings.Contains(out, "Cluster lab1/lab1") {
		t.Fatalf("dry run with --cascade: %v\n%s", err, out)
	}
	if _, found, _ := mc.Get(t.Context(), clRef); !found || len(srv.VMs()) != 4 {
		t.Fatal("the dry run deleted something")
	}
	if out, err := run("n\n", false, true); !errors.Is(err, ErrAborted) {
		t.Fatalf("answered no: %v\n%s", err, out)
	}
	if _, found, _ := mc.Get(t.Context(), clRef); !found {
		t.Fatal("answering no deleted the cluster")
	}

	// Nothing deletes VM 202 (no CAPMOX here yet): the management VM stays
	// and the error names the VM.
	timeout = 3 * time.Second
	out, err = run("y\n", false, true)
	if err == nil || !strings.Contains(err.Error(), "VM 202 on pve (of ProxmoxMachine lab1/lab1-workers-x7k2p)") || !strings.Contains(err.Error(), "the management VM was kept") {
		t.Fatalf("mgmt down --cascade with a VM that never goes = %v\n%s", err, out)
	}
	if _, found, err := mc.Get(t.Context(), clRef); found || err != nil {
		t.Errorf("Cluster lab1/lab1 is still there (%v)", err)
	}
	if len(srv.VMs()) != 4 {
		t.Fatalf("mgmt down deleted VMs while a workload VM was left: %v", ids(srv))
	}
	// With the Cluster gone, a dry run says it looked and found none.
	out, err = run("", true, false)
	if want := "workload clusters: none on the management cluster " + mc.Host(); err != nil || !strings.Contains(out, want) {
		t.Errorf("dry run with no workload cluster: %v; want %q:\n%s", err, want, out)
	}

	// Cluster API deleted the cluster, but its VM is not gone yet: down
	// waits for it. Stand in for CAPMOX finishing: stop and destroy VM 202
	// through the PVE API, a few seconds into the wait.
	mc2, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc2.Apply(t.Context(), []*unstructured.Unstructured{cl}, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout = 30 * time.Second
	go func() {
		time.Sleep(3 * time.Second)
		if err := pveCall(srv, "POST", "/nodes/pv1-1/qemu/202/status/stop"); err != nil {
			t.Errorf("standing in for CAPMOX: %v", err)
		}
		// PVE refuses to destroy a VM until its stop task has ended.
		for i := 0; ; i++ {
			err := pveCall(srv, "DELETE", "/nodes/pv1-1/qemu/202")
			if err == nil {
				return
			}
			if i == 20 {
				t.Errorf("standing in for CAPMOX: %v", err)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	out, err = run("y\n", false, true)
	if err != nil {
		t.Fatalf("mgmt down --cascade: %v\n%s", err, out)
	}
	if _, found, err := mc.Get(t.Context(), clRef); found || err != nil {
		t.Errorf("Cluster lab1/lab1 is still there (%v)", err)
	}
	if got := ids(srv); len(got) != 2 || got[0] != 150 || got[1] != 151 {
		t.Errorf("left %v, want the hand-made VM and the other lab's", got)
	}
	for _, want := range []string{"delete cluster lab1", "wait for the Cluster to go", "wait for the workload clusters' VMs to go", "delete labctl-mgmt (VMID 201 on pv1-1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// pveCall makes one request to the fake PVE as a client holding the lab's
// token would, and waits for its task.
func pveCall(srv *pvetest.Server, method, path string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/api2/json"+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "PVEAPIToken="+srv.TokenID+"="+srv.Secret)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return nil
}

// TestCascadeWaitsForARestoredDomain: a LibvirtMachine that 'mgmt
// restore' (clusterctl move) recreated has a new UID, and its domain is
// the one its providerID names; --cascade must wait for that domain, not
// for one of the new UID, which never existed. One made before its
// providerID is recorded is waited for by its UID, which its domain gets.
func TestCascadeWaitsForARestoredDomain(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi"), testbed.WithCRDPaths("../../embedded/provider/libvirt/crds"))
	mc := kube.NewForConfig(env.Config, env.Kubeconfig)
	const domain = "0f0e5a52-5a1c-4c4e-9a3e-6d1f2b7c9e01"
	machine := func(name, providerID string) *unstructured.Unstructured {
		spec := map[string]any{"cpus": int64(2), "memoryMiB": int64(2048), "diskGiB": int64(20),
			"image": map[string]any{"pool": "default", "volume": "noble-v1.35.4.qcow2"}}
		if providerID != "" {
			spec["providerID"] = providerID
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": clusterapi.LibvirtMachineGVK.GroupVersion().String(), "kind": "LibvirtMachine",
			"metadata": map[string]any{"name": name, "namespace": "lab1", "labels": map[string]any{clusterapi.ClusterNameLabel: "lab1"}},
			"spec":     spec,
		}}
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "lab1"}}}
	if _, err := mc.Apply(t.Context(), []*unstructured.Unstructured{ns, machine("lab1-kvm-restored", "libvirt://kvm1/"+domain), machine("lab1-kvm-new", "")}, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	made, found, err := mc.Get(t.Context(), kube.Ref{GVK: clusterapi.LibvirtMachineGVK, Namespace: "lab1", Name: "lab1-kvm-new"})
	if err != nil || !found {
		t.Fatalf("LibvirtMachine lab1-kvm-new: found %v, %v", found, err)
	}
	newUID := string(made.GetUID())
	got, err := machineVMs(t.Context(), mc, []kube.Ref{{GVK: clusterapi.ClusterGVK, Namespace: "lab1", Name: "lab1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"LibvirtMachine lab1/lab1-kvm-restored": domain, "LibvirtMachine lab1/lab1-kvm-new": newUID}
	if len(got) != len(want) {
		t.Fatalf("machine VMs = %+v, want %v", got, want)
	}
	for _, v := range got {
		if newUID == "" || want[v.Machine] != v.UUID {
			t.Errorf("%s waits for domain %q, want %q", v.Machine, v.UUID, want[v.Machine])
		}
	}
}
