package labstatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/labstatus"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

func TestMain(m *testing.M) {
	code := m.Run()
	libvirttest.StopShared()
	os.Exit(code)
}

const ownerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"

// hosts are the lab's hypervisors for the test: a fake PVE, a real
// libvirtd (its test driver) over TLS, a libvirt host that accepts TCP
// and never answers, and a Proxmox API whose port refuses.
type hosts struct {
	pve    *pvetest.Server
	kvm1   *libvirttest.Daemon
	silent *testbed.Silent
	closed string // 127.0.0.1:port with nothing listening
}

// loopbackLab is an example lab with its first hypervisor, a Proxmox
// one, at srv (TLS pinned, the token secret in its env variable), the
// owner's key inline, and edit's changes.
func loopbackLab(t *testing.T, example string, srv *pvetest.Server, edit func(doc map[string]any)) *config.Lab {
	t.Helper()
	raw, err := os.ReadFile("../../examples/" + example)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	pve := doc["hypervisors"].([]any)[0].(map[string]any)["proxmox"].(map[string]any)
	pve["url"] = srv.URL
	pve["tls"] = map[string]any{"fingerprint": proxmox.Fingerprint(srv.Certificate())}
	m := doc["management"].(map[string]any)
	delete(m, "sshPublicKeyFile")
	m["sshPublicKeys"] = []string{ownerKey}
	if edit != nil {
		edit(doc)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PVE_TOKEN_SECRET", srv.Secret)
	lab, err := config.Parse("lab.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// statusLab is examples/lab-tenants.yaml (lab1 on kubeadm, the tenants
// tenant1 and tenant2 on Kamaji) with its hosts on loopback, and a
// second Proxmox hypervisor pve-off that refuses connections.
func statusLab(t *testing.T, h hosts) *config.Lab {
	t.Helper()
	lab := loopbackLab(t, "lab-tenants.yaml", h.pve, func(doc map[string]any) {
		hvs := doc["hypervisors"].([]any)
		tls := map[string]any{"caFile": h.kvm1.CAFile, "certFile": h.kvm1.CertFile, "keyFile": h.kvm1.KeyFile}
		kvm1 := hvs[1].(map[string]any)["libvirt"].(map[string]any)
		kvm1["uri"], kvm1["storagePool"], kvm1["tls"] = "qemu+tls://127.0.0.1:"+h.kvm1.TLSPort+"/system", "default-pool", tls
		delete(kvm1, "sshKeyFile")
		delete(kvm1, "knownHostsFile")
		kvm2 := hvs[2].(map[string]any)["libvirt"].(map[string]any)
		kvm2["uri"], kvm2["storagePool"], kvm2["tls"] = "qemu+tls://"+h.silent.Addr+"/system", "default-pool", tls
		off := map[string]any{"url": "https://" + h.closed, "tokenID": "root@pam!labctl", "tokenSecret": map[string]any{"env": "PVE_TOKEN_SECRET"},
			"tls":   map[string]any{"fingerprint": proxmox.Fingerprint(h.pve.Certificate())},
			"nodes": []any{map[string]any{"name": "pv2-1", "storage": "local-lvm", "imageStorage": "local", "bridge": "vmbr0"}}}
		doc["hypervisors"] = append(hvs, map[string]any{"name": "pve-off", "proxmox": off})
	})
	// The test libvirtd serves libvirt's test driver, which lab.yaml's
	// validation (rightly) does not offer.
	lab.Hypervisors[1].Libvirt.URI = "test+tls://127.0.0.1:" + h.kvm1.TLSPort + "/default"
	return lab
}

// TestStatusWholeLab reads a lab whose parts are all real where they can
// be: the management cluster is a real kube-apiserver with Cluster API's,
// CAPMOX's, IPAM's and Kamaji's CRDs holding lab1 and tenant1 as 'cluster
// create' renders them, with the status Cluster API's controllers would
// write (no controller runs here). lab1's workload cluster is the same
// API server, reached through lab1's kubeconfig Secret; tenant1's
// kubeconfig names a server that never answers; tenant2 is not created.
// pve is the fake PVE, kvm1 a real libvirtd, kvm2 never answers and
// pve-off refuses. Every part still shows, and each dead one says why
// and what to check.
func TestStatusWholeLab(t *testing.T) {
	h := hosts{pve: pvetest.New(t), kvm1: libvirttest.Start(t), silent: testbed.StartSilent(t), closed: testbed.ClosedAddr(t)}
	lab := statusLab(t, h)
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox", "ipam", "kamaji"))

	// On pve: the management VM, a stopped VM (CAPMOX counts its memory
	// as reserved) and a node template (it counts none).
	h.pve.AddVM("pv1-1", 201, "labctl-mgmt", 8192, true, false, "labctl", "labctl-lab-home")
	h.pve.AddVM("pv1-1", 210, "lab1-workers-old", 2048, false, false, "labctl", "labctl-image-ubuntu-2404-kube")
	h.pve.AddVM("pv1-1", 9000, "ubuntu-2404-kube-v1.33.1", 2048, false, true, "labctl", "labctl-image-ubuntu-2404-kube", "kubernetes-v1.33.1")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	mgmt, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	standInClusters(ctx, t, env, mgmt, lab, h.silent.Addr)

	fio, _, _, errOut := ui.Test()
	f := cmdutil.New(fio, &cmdutil.Settings{Kubeconfig: env.Kubeconfig})
	f.Lab = func(context.Context) (*config.Lab, config.Source, error) { return lab, config.Source{}, nil }
	const timeout = 8 * time.Second
	run := func(format string) (string, error) {
		io, _, out, _ := ui.Test()
		io.Err = errOut
		_, err := labstatus.Status(ctx, labstatus.Options{IO: io, Lab: lab, Output: format, Driver: f.Driver, Mgmt: f.Mgmt, Workload: f.Workload, Timeout: timeout})
		return out.String(), err
	}

	text, err := run("text")
	t.Logf("labctl status:\n%s", text)
	if err != labstatus.ErrIncomplete {
		t.Errorf("status with dead hosts = %v, want ErrIncomplete (exit 1)", err)
	}
	js, _ := run("json")
	var r labstatus.Report
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, js)
	}
	if r.Complete {
		t.Error("complete is true with dead hosts")
	}

	// What pve holds, as CAPMOX counts memory: every VM that is not a
	// template, stopped ones too.
	hv := byName(t, r.Hypervisors, "pve")
	if !hv.Reachable || hv.Error != "" || len(hv.Nodes) != 1 || !strings.HasPrefix(hv.Version, "PVE ") {
		t.Fatalf("pve = %+v", hv)
	}
	if n := hv.Nodes[0]; n.Name != "pv1-1" || n.CPUs != 8 || n.MemoryMiB != 29860 || n.ReservedMiB != 8192+2048 || n.VMs != 2 || n.RunningVMs != 1 {
		t.Errorf("pv1-1 = %+v; want 8 CPUs, 29860 MiB, 10240 MiB reserved (the running and the stopped VM, not the template), 2 VMs, 1 running", n)
	}
	if !strings.Contains(text, "10.0 GiB") || !strings.Contains(text, "2 (1 running)") {
		t.Errorf("the pv1-1 row lacks 10.0 GiB reserved and 2 (1 running) VMs")
	}

	// kvm1 is what the libvirtd itself reports.
	d, err := drivers.Open(ctx, lab, "kvm1")
	if err != nil {
		t.Fatal(err)
	}
	want, err := d.Capacity(ctx)
	_ = drivers.Close(d)
	if err != nil {
		t.Fatal(err)
	}
	kvm1 := byName(t, r.Hypervisors, "kvm1")
	if !kvm1.Reachable || kvm1.Error != "" || len(kvm1.Nodes) != 1 || kvm1.Nodes[0].CPUs != want[0].CPUs ||
		kvm1.Nodes[0].MemoryMiB != want[0].MemoryMiB || kvm1.Nodes[0].ReservedMiB != want[0].ReservedMiB {
		t.Errorf("kvm1 = %+v; the libvirtd reports %+v", kvm1, want)
	}

	// The dead ones: unreachable, with the lab.yaml field and the fix.
	for name, says := range map[string][]string{
		"kvm2":    {"did not answer within 8s", "hypervisors[kvm2].libvirt.uri", "that the host is up", "libvirtd listens"},
		"pve-off": {"connection was refused", "hypervisors[pve-off].proxmox.url", "pveproxy"},
	} {
		hv := byName(t, r.Hypervisors, name)
		if hv.Reachable || len(hv.Nodes) != 0 {
			t.Errorf("%s = %+v, want unreachable", name, hv)
		}
		for _, s := range says {
			if !strings.Contains(hv.Error, s) {
				t.Errorf("%s's error %q lacks %q", name, hv.Error, s)
			}
			if !strings.Contains(text, s) {
				t.Errorf("the screen lacks %q for %s", s, name)
			}
		}
		if !strings.Contains(text, "unreachable") {
			t.Error("the screen says no host is unreachable")
		}
	}

	// The management VM on pve, and its stack read as 'mgmt status' reads it.
	m := r.Management
	if m.State != "running" || m.VMID != 201 || m.Node != "pv1-1" || m.MemoryMiB != 8192 {
		t.Errorf("management = %+v, want VM 201 running on pv1-1 with 8192 MiB", m)
	}
	if m.Stack == nil || m.StackError != "" || m.StackState != "not-ready" || m.Stack.Server != strings.TrimSuffix(env.Config.Host, "/") || m.Stack.Ready {
		t.Fatalf("management stack = %+v (%s); want the test bed's, not ready", m.Stack, m.StackError)
	}
	if c := m.Stack.Components[0]; c.Name != "cert-manager" || c.Ready {
		t.Errorf("first component = %+v, want cert-manager, not ready", c)
	}
	for _, s := range []string{"VM labctl-mgmt on pve: running, node pv1-1, VMID 201, 1 vCPU, 8.0 GiB", "stack at " + strings.TrimSuffix(env.Config.Host, "/"), "cert-manager"} {
		if !strings.Contains(text, s) {
			t.Errorf("the screen lacks %q", s)
		}
	}

	// The template on pve; kvm1's pool holds no node image.
	if len(r.Images) != 1 || r.Images[0].VMID != 9000 || r.Images[0].Image != "ubuntu-2404-kube" || r.Images[0].Kubernetes != "v1.33.1" {
		t.Errorf("images = %+v, want pve's template 9000", r.Images)
	}

	// The clusters: lab1 with its Nodes, tenant1 whose API hangs, tenant2 not created.
	if r.ClustersError != "" || len(r.Clusters) != 3 {
		t.Fatalf("clusters = %+v (%s)", r.Clusters, r.ClustersError)
	}
	lab1, tenant1, tenant2 := r.Clusters[0], r.Clusters[1], r.Clusters[2]
	if lab1.Name != "lab1" || lab1.ControlPlane.Provider != "kubeadm" || lab1.ControlPlane.Ready != 1 || lab1.ControlPlane.Replicas != 1 ||
		lab1.NodesReady != 2 || lab1.Nodes != 3 || lab1.NodesError != "" || lab1.Phase != "Provisioned" {
		t.Errorf("lab1 = %+v; want kubeadm 1/1 ready, Provisioned, 2 of 3 Nodes Ready", lab1)
	}
	if len(lab1.Pools) != 1 || lab1.Pools[0].Name != "workers" || *lab1.Pools[0].Min != 0 || lab1.Pools[0].Current != 2 || *lab1.Pools[0].Max != 5 {
		t.Errorf("lab1 pools = %+v, want workers 0/2/5", lab1.Pools)
	}
	if tenant1.Name != "tenant1" || tenant1.ControlPlane.Provider != "kamaji" || tenant1.ControlPlane.Ready != 2 || tenant1.ControlPlane.Replicas != 2 ||
		!strings.Contains(tenant1.NodesError, "no answer within 8s") {
		t.Errorf("tenant1 = %+v; want kamaji 2/2 ready, its Nodes not answering", tenant1)
	}
	if len(tenant1.Pools) != 1 || tenant1.Pools[0].Name != "workers" || *tenant1.Pools[0].Min != 0 || tenant1.Pools[0].Current != 1 || *tenant1.Pools[0].Max != 5 {
		t.Errorf("tenant1 pools = %+v, want workers 0/1/5", tenant1.Pools)
	}
	if tenant2.Name != "tenant2" || tenant2.Phase != "NotCreated" || len(tenant2.Pools) != 1 || tenant2.Pools[0].Name != "kvm" || *tenant2.Pools[0].Max != 3 {
		t.Errorf("tenant2 = %+v, want NotCreated with pool kvm 0-3", tenant2)
	}
	for name, row := range map[string][]string{
		"lab1":    {"kubeadm 1/1 ready", "Provisioned", "2/3", "workers", "0", "2", "5"},
		"tenant1": {"kamaji 2/2 ready", "Provisioned", "unknown", "workers", "0", "1", "5"},
		"tenant2": {"kamaji (1)", "NotCreated", "-", "kvm", "0", "0", "3"},
	} {
		if got := fields(text, name); !slices.Equal(got, row) {
			t.Errorf("the screen's %s row = %q, want %q", name, got, row)
		}
	}
	if !strings.Contains(text, "✗ tenant1 nodes: reading the workload cluster's Nodes at https://"+h.silent.Addr+": no answer within 8s; check that its API server runs") {
		t.Error("the screen does not say why tenant1's Nodes are unknown")
	}
	// The orphans, as 'labctl gc' finds them: the stopped clone no
	// ProxmoxMachine names, never the management VM or the template
	// lab1 clones; the dead hosts are named as not looked at.
	if len(r.Orphans) != 1 || r.Orphans[0].ID != 210 || r.Orphans[0].Kind != "vm" || r.Orphans[0].MemoryMiB != 2048 ||
		!strings.Contains(r.Orphans[0].Reason, "no ProxmoxMachine names it") || r.OrphansError != "" {
		t.Errorf("orphans = %+v (%s), want VM 210 alone", r.Orphans, r.OrphansError)
	}
	if !strings.Contains(r.OrphansNote, "not looked for on kvm2, pve-off") {
		t.Errorf("orphans note = %q, want kvm2 and pve-off named", r.OrphansNote)
	}
	if got := cells(text, "VMID 210"); len(got) != 6 || got[0] != "pve" || got[1] != "vm" || got[3] != "no" || got[4] != "2.0 GiB" {
		t.Errorf("the screen's orphan row = %q", got)
	}
	for _, s := range []string{"lab1-workers-old (VMID 210 on pv1-1)", "1 orphan(s), reserving 2.0 GiB; 'labctl gc --dry-run' lists them"} {
		if !strings.Contains(text, s) {
			t.Errorf("the screen lacks %q", s)
		}
	}
	if strings.Contains(js+text+errOut.String(), h.pve.Secret) {
		t.Error("the token secret was printed")
	}
}

// fields are the cells of the screen's row that starts with name: table
// columns are three spaces apart.
func fields(text, name string) []string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+" ") {
			var out []string
			for _, c := range strings.Split(l, "   ")[1:] {
				if c = strings.TrimSpace(c); c != "" {
					out = append(out, c)
				}
			}
			return out
		}
	}
	return nil
}

// cells are the cells of the screen's first row holding s.
func cells(text, s string) []string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			var out []string
			for _, c := range strings.Split(l, "   ") {
				if c = strings.TrimSpace(c); c != "" {
					out = append(out, c)
				}
			}
			return out
		}
	}
	return nil
}

func byName(t *testing.T, hvs []labstatus.Hypervisor, name string) labstatus.Hypervisor {
	t.Helper()
	for _, h := range hvs {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("no hypervisor %s in %+v", name, hvs)
	return labstatus.Hypervisor{}
}

// standInClusters applies lab1 and tenant1 as 'cluster create' renders
// them, then writes what Cluster API's controllers would: lab1 Provisioned
// with its control plane ready and 2 workers; for tenant1, what the
// topology controller makes from the ClusterClass (the KamajiControlPlane
// and the pool's MachineDeployment, named with its random suffix and
// labelled with the pool) and 2 control-plane pods ready. lab1's
// kubeconfig Secret reaches this API server, which holds lab1's 3 Nodes,
// 2 of them Ready; tenant1's names hung, a server that never answers.
func standInClusters(ctx context.Context, t *testing.T, env *testbed.Env, mgmt *kube.Client, lab *config.Lab, hung string) {
	t.Helper()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var lab1MD *unstructured.Unstructured
	for _, name := range []string{"lab1", "tenant1"} {
		r, err := cluster.Render(lab, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mgmt.Apply(ctx, r.Objects, kube.ApplyOptions{}); err != nil {
			t.Fatalf("applying %s as create does: %v", name, err)
		}
		for _, o := range r.Objects {
			if name == "lab1" && o.GroupVersionKind() == clusterapi.MachineDeploymentGVK {
				lab1MD = o.DeepCopy()
			}
		}
	}
	status := func(apiVersion, kind, ns, name string, fields map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			t.Fatalf("reading %s %s/%s: %v", kind, ns, name, err)
		}
		u.Object["status"] = fields
		if err := c.Status().Update(ctx, u); err != nil {
			t.Fatalf("writing the status of %s %s/%s: %v", kind, ns, name, err)
		}
	}
	create := func(u *unstructured.Unstructured) {
		t.Helper()
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	status("cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1", map[string]any{"phase": "Provisioned",
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true}})
	status("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "lab1", "lab1-control-plane", map[string]any{"replicas": int64(1), "readyReplicas": int64(1)})
	status("cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", lab1MD.GetName(), map[string]any{"replicas": int64(2), "readyReplicas": int64(2)})

	// What the topology controller makes for tenant1.
	kcp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": clusterapi.KamajiControlPlaneGVK.GroupVersion().String(), "kind": "KamajiControlPlane",
		"metadata": map[string]any{"namespace": "tenant1", "name": "tenant1-x7k2p"},
		"spec":     map[string]any{"replicas": int64(2), "version": lab.Clusters[1].KubernetesVersion, "dataStoreName": "default"},
	}}
	create(kcp)
	status(kcp.GetAPIVersion(), "KamajiControlPlane", "tenant1", "tenant1-x7k2p", map[string]any{"replicas": int64(2), "readyReplicas": int64(2),
		"ready": true, "version": lab.Clusters[1].KubernetesVersion})
	tcl := &unstructured.Unstructured{}
	tcl.SetGroupVersionKind(clusterapi.ClusterGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: "tenant1", Name: "tenant1"}, tcl); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedMap(tcl.Object, map[string]any{"apiGroup": clusterapi.KamajiControlPlaneGVK.Group, "kind": "KamajiControlPlane", "name": "tenant1-x7k2p"}, "spec", "controlPlaneRef")
	if err := c.Update(ctx, tcl); err != nil {
		t.Fatalf("setting tenant1's controlPlaneRef: %v", err)
	}
	status("cluster.x-k8s.io/v1beta2", "Cluster", "tenant1", "tenant1", map[string]any{"phase": "Provisioned",
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true}})
	md := lab1MD.DeepCopy()
	md.SetNamespace("tenant1")
	md.SetName("tenant1-workers-m9qzt")
	md.SetResourceVersion("")
	md.SetLabels(map[string]string{clusterapi.ClusterNameLabel: "tenant1", clusterapi.TopologyPoolLabel: "workers"})
	_ = unstructured.SetNestedField(md.Object, "tenant1", "spec", "clusterName")
	create(md)
	status("cluster.x-k8s.io/v1beta2", "MachineDeployment", "tenant1", md.GetName(), map[string]any{"replicas": int64(1)})

	// The kubeconfig Secrets Cluster API keeps.
	kc, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hungKC := strings.ReplaceAll(string(kc), strings.Trim(strings.TrimPrefix(env.Config.Host, "https://"), "/"), hung)
	if hungKC == string(kc) {
		t.Fatal("tenant1's kubeconfig still names the test bed")
	}
	for name, data := range map[string]string{"lab1": string(kc), "tenant1": hungKC} {
		create(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"namespace": name, "name": name + "-kubeconfig", "labels": map[string]any{clusterapi.ClusterNameLabel: name}},
			"type":     "cluster.x-k8s.io/secret", "stringData": map[string]any{"value": data}}})
	}
	// lab1's Nodes: its control plane and two workers, one not Ready.
	for name, ready := range map[string]string{"lab1-cp-8jz4w": "True", "lab1-workers-a1": "True", "lab1-workers-b2": "False"} {
		create(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": name}}})
		status("v1", "Node", "", name, map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": ready,
			"lastHeartbeatTime": time.Now().UTC().Format(time.RFC3339), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "reason": "KubeletReady", "message": "kubelet"}}})
	}
}

// TestStatusWithoutManagementCluster: before 'mgmt up' there is nothing
// to read on a management cluster, which is no failure: the hosts show,
// the management VM is missing, lab.yaml's clusters are not created, and
// status is complete.
func TestStatusWithoutManagementCluster(t *testing.T) {
	srv := pvetest.New(t)
	lab := loopbackLab(t, "lab.yaml", srv, nil)
	noMgmt := func(context.Context) (*kube.Client, error) {
		return nil, fmt.Errorf("no management cluster yet for lab %q: run 'labctl mgmt up': %w", "home", kube.ErrNoMgmt)
	}
	io, _, out, _ := ui.Test()
	io.Err = out
	f := cmdutil.New(io, &cmdutil.Settings{})
	f.Lab = func(context.Context) (*config.Lab, config.Source, error) { return lab, config.Source{}, nil }
	r, err := labstatus.Status(t.Context(), labstatus.Options{IO: io, Lab: lab, Driver: f.Driver, Mgmt: noMgmt,
		Workload: func(context.Context, string) (*rest.Config, error) {
			t.Error("read a workload cluster without a management cluster")
			return nil, kube.ErrNoMgmt
		}})
	t.Logf("labctl status:\n%s", out.String())
	if err != nil || !r.Complete {
		t.Fatalf("status = %v, complete %v; want complete", err, r.Complete)
	}
	if m := r.Management; m.State != "missing" || m.StackState != "none" || m.Stack != nil {
		t.Errorf("management = %+v, want the VM missing and no stack", m)
	}
	if len(r.Orphans) != 0 || !strings.Contains(r.OrphansNote, "no management cluster") {
		t.Errorf("orphans = %+v (%s), want none and a note", r.Orphans, r.OrphansNote)
	}
	if len(r.Clusters) != 1 || r.Clusters[0].Name != "lab1" || r.Clusters[0].Phase != "NotCreated" || r.ClustersError != "" {
		t.Errorf("clusters = %+v (%s), want lab1 NotCreated", r.Clusters, r.ClustersError)
	}
	text := out.String()
	for _, s := range []string{"VM labctl-mgmt on pve: missing", "stack: no management cluster yet", "NotCreated"} {
		if !strings.Contains(text, s) {
			t.Errorf("the screen lacks %q", s)
		}
	}
	if strings.Contains(text, "✗") {
		t.Error("the screen marks a failure where there is none")
	}
}
