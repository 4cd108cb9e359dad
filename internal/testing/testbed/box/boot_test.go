package box_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/scaletest"
	"github.com/labctl/labctl/internal/testing/bootsim"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// lab1's machines boot: the real CAPMOX clones and starts the
// control-plane VM from labctl's rendered objects, the sim boots it with
// the real kubeadm bootstrap provider's cloud-config (kubeadm init: a
// workload control plane on the VIP 127.77.0.30), and the real
// KubeadmControlPlane reports the control plane initialized; the
// kubeconfig Secret Cluster API writes reaches the workload API server,
// and KCP finds etcd and the control-plane components healthy and the
// control plane available. Then the worker pool scaled to one joins: its Node is Ready with the
// ProxmoxMachine's providerID, the VM's cores and memory and the pool's
// label, and both Machines are Running with their nodeRef. The worker
// carries Cilium's startup taint until labctl installs Cilium; then a
// pod runs on it (kwok). Scaled back to zero, the VM and its Node go.
func TestLab1MachinesBoot(t *testing.T) {
	e := bootBox(t, labShape{})
	fake, lab, cl := e.fake, e.lab, e.cl
	r, err := clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: "lab1", Credentials: ownerKeys{}, Pins: versions.MustGet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	if _, err := e.kc.Apply(ctx, r.Objects, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying lab1's objects: %v", err)
	}
	ns := r.Namespace
	alive := e.alive(t)

	// The real KCP marks the control plane initialized once it reads
	// kubeadm-config from the workload cluster.
	kcp := get(ctx, t, cl, "controlplane.cluster.x-k8s.io", "KubeadmControlPlane", ns, r.ControlPlane)
	waitUntil(ctx, t, 6*time.Minute, "KubeadmControlPlane status.initialization.controlPlaneInitialized", alive, func() (bool, string) {
		kcp = get(ctx, t, cl, "controlplane.cluster.x-k8s.io", "KubeadmControlPlane", ns, r.ControlPlane)
		ok, _, _ := unstructured.NestedBool(kcp.Object, "status", "initialization", "controlPlaneInitialized")
		conds, _, _ := unstructured.NestedSlice(kcp.Object, "status", "conditions")
		return ok, fmt.Sprint(conds)
	})

	// Cluster API's kubeconfig Secret works against the sim's API server.
	var sec corev1.Secret
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "lab1-kubeconfig"}, &sec); err != nil {
		t.Fatalf("Cluster API's kubeconfig Secret: %v", err)
	}
	wcfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"])
	if err != nil {
		t.Fatalf("lab1-kubeconfig: %v", err)
	}
	if wcfg.Host != "https://127.77.0.30:6443" {
		t.Errorf("lab1-kubeconfig names %s, want the VIP https://127.77.0.30:6443", wcfg.Host)
	}
	wcs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := wcs.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading kubeadm-config with Cluster API's kubeconfig: %v", err)
	}
	if !strings.Contains(cm.Data["ClusterConfiguration"], "controlPlaneEndpoint: 127.77.0.30:6443") {
		t.Errorf("kubeadm-config's ClusterConfiguration lacks the endpoint:\n%s", cm.Data["ClusterConfiguration"])
	}

	// The control-plane Machine is Running with its Node.
	cpMachine := runningMachine(ctx, t, cl, wcs, ns, "cluster.x-k8s.io/control-plane", alive)
	cpNode, err := wcs.CoreV1().Nodes().Get(ctx, cpMachine.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cpNode.Labels[bootsim.LabelControlPlane]; !ok || !hasTaint(cpNode, bootsim.LabelControlPlane) {
		t.Errorf("control-plane Node %s: labels %v taints %v, want kubeadm's control-plane label and taint", cpNode.Name, cpNode.Labels, cpNode.Spec.Taints)
	}

	// KCP also finds the control plane available: its etcd checks reach
	// etcd through the API server's port-forward to the etcd mirror Pod
	// (kwok serves it), and the static pods' mirror Pods are Ready.
	waitUntil(ctx, t, 3*time.Minute, "KubeadmControlPlane Available, EtcdClusterHealthy and ControlPlaneComponentsHealthy", alive, func() (bool, string) {
		kcp = get(ctx, t, cl, "controlplane.cluster.x-k8s.io", "KubeadmControlPlane", ns, r.ControlPlane)
		conds, _, _ := unstructured.NestedSlice(kcp.Object, "status", "conditions")
		want := map[string]bool{"Available": false, "EtcdClusterHealthy": false, "ControlPlaneComponentsHealthy": false}
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if typ, _ := m["type"].(string); m["status"] == "True" {
				if _, ok := want[typ]; ok {
					want[typ] = true
				}
			}
		}
		return want["Available"] && want["EtcdClusterHealthy"] && want["ControlPlaneComponentsHealthy"], fmt.Sprint(conds)
	})

	// A worker joins when the pool is scaled to one.
	md := get(ctx, t, cl, "cluster.x-k8s.io", "MachineDeployment", ns, "lab1-workers")
	if err := cl.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))); err != nil {
		t.Fatalf("scaling lab1-workers to 1: %v", err)
	}
	worker := runningMachine(ctx, t, cl, wcs, ns, "cluster.x-k8s.io/deployment-name=lab1-workers", alive)
	node, err := wcs.CoreV1().Nodes().Get(ctx, worker.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.ProviderID != worker.providerID {
		t.Errorf("worker Node %s providerID %q, want the ProxmoxMachine's %q", node.Name, node.Spec.ProviderID, worker.providerID)
	}
	if node.Labels["labctl.dev/pool"] != "workers" || hasTaint(node, bootsim.LabelControlPlane) {
		t.Errorf("worker Node %s: labels %v taints %v, want the pool's label and no control-plane taint", node.Name, node.Labels, node.Spec.Taints)
	}
	wantSpec := machineSpec(t, r.Find("ProxmoxMachineTemplate", workerTemplate(t, r)))
	if got := node.Status.Capacity[corev1.ResourceCPU]; got.Cmp(*resource.NewQuantity(wantSpec.cores, resource.DecimalSI)) != 0 {
		t.Errorf("worker Node cpu capacity %s, want the VM's %d cores", got.String(), wantSpec.cores)
	}
	if got := node.Status.Capacity[corev1.ResourceMemory]; got.Value() != wantSpec.memoryMiB<<20 {
		t.Errorf("worker Node memory capacity %s, want the VM's %d MiB", got.String(), wantSpec.memoryMiB)
	}
	t.Logf("worker %s: Node %s Ready, providerID %s, capacity %v", worker.name, node.Name, node.Spec.ProviderID, node.Status.Capacity)

	// The worker registered with Cilium's startup taint, and nothing
	// lifts it while Cilium is not installed: a pod for the pool stays
	// unscheduled. (The Cilium stand-in looks every second; 8 s is well
	// past its 3 s delay.)
	if !hasTaint(node, clusterapi.StartupTaint) {
		t.Fatalf("worker Node %s registered without %s: taints %v", node.Name, clusterapi.StartupTaint, node.Spec.Taints)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "inflate", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"labctl.dev/pool": "workers"},
			Containers:   []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := wcs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a pod in the workload cluster: %v", err)
	}
	time.Sleep(8 * time.Second)
	if n, err := wcs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil || !hasTaint(n, clusterapi.StartupTaint) {
		t.Fatalf("without Cilium installed, %s left Node %s (err %v)", clusterapi.StartupTaint, node.Name, err)
	}
	if p, err := wcs.CoreV1().Pods("default").Get(ctx, "inflate", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("a pod was scheduled onto a node Cilium does not run on yet: node %q, %v", p.Spec.NodeName, err)
	}

	// labctl installs Cilium with its own code (cluster create's step),
	// the real chart labctl carries: the stand-in operator lifts the
	// taint, the scheduler places the pod on the worker and kwok runs it.
	lab1, err := lab.Cluster("lab1")
	if err != nil {
		t.Fatal(err)
	}
	cil, err := cluster.NewCilium(lab, lab1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cil.Install(ctx, sec.Data["value"], 2*time.Minute); err != nil {
		t.Fatalf("labctl installing Cilium: %v", err)
	}
	waitUntil(ctx, t, 2*time.Minute, "pod inflate Running on the worker", alive, func() (bool, string) {
		n, err := wcs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p, err := wcs.CoreV1().Pods("default").Get(ctx, "inflate", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !hasTaint(n, clusterapi.StartupTaint) && p.Spec.NodeName == node.Name && p.Status.Phase == corev1.PodRunning,
			fmt.Sprintf("Node taints %v; pod on %q phase %s", n.Spec.Taints, p.Spec.NodeName, p.Status.Phase)
	})

	// Scaled to zero, Cluster API deletes the Machine, CAPMOX stops and
	// destroys the VM, and its Node goes with it.
	if err := cl.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
		t.Fatalf("scaling lab1-workers to 0: %v", err)
	}
	waitUntil(ctx, t, 4*time.Minute, "worker Machine, VM and Node gone", alive, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineList"})
		if err := cl.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"cluster.x-k8s.io/deployment-name": "lab1-workers"}); err != nil {
			return false, err.Error()
		}
		_, err := wcs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		vmLeft := false
		for _, v := range fake.VMs() {
			vmLeft = vmLeft || v.Name() == worker.name
		}
		return len(list.Items) == 0 && !vmLeft && apierrors.IsNotFound(err),
			fmt.Sprintf("%d worker Machines, VM %s left %v, Node %s: %v", len(list.Items), worker.name, vmLeft, node.Name, err)
	})
}

func workerTemplate(t *testing.T, r *clusterapi.Rendered) string {
	t.Helper()
	md := r.Find("MachineDeployment", "lab1-workers")
	if md == nil {
		t.Fatal("lab1 renders no MachineDeployment lab1-workers")
	}
	name, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "name")
	return name
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func get(ctx context.Context, t testing.TB, cl client.Client, group, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1beta2", Kind: kind})
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("getting %s %s/%s: %v", kind, ns, name, err)
	}
	return u
}

// waitUntil polls ok every second until it holds, failing with its last
// detail after d.
func waitUntil(ctx context.Context, t testing.TB, d time.Duration, what string, alive func(), ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		done, detail := ok()
		if done {
			return
		}
		alive()
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no %s after %s: %s", what, d, detail)
		}
		time.Sleep(time.Second)
	}
}

type runningM struct {
	name, node, providerID string
}

// runningMachine waits for the one Machine matching selector to be
// Running with a nodeRef to a Ready Node, and returns it with its
// ProxmoxMachine's providerID.
func runningMachine(ctx context.Context, t *testing.T, cl client.Client, wcs *kubernetes.Clientset, ns, selector string, alive func()) runningM {
	t.Helper()
	sel, err := metav1.ParseToLabelSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	var m runningM
	waitUntil(ctx, t, 6*time.Minute, "Running Machine "+selector+" with a Ready Node", alive, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineList"})
		if err := cl.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: ls}); err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("%d Machines", len(list.Items))
		}
		u := list.Items[0]
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
		pid, _, _ := unstructured.NestedString(u.Object, "spec", "providerID")
		if phase != "Running" || node == "" {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			return false, fmt.Sprintf("Machine %s phase %q nodeRef %q conditions %v", u.GetName(), phase, node, conds)
		}
		n, err := wcs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				m = runningM{name: u.GetName(), node: node, providerID: pid}
				return true, ""
			}
		}
		return false, fmt.Sprintf("Node %s not Ready: %v", node, n.Status.Conditions)
	})
	return m
}

// bootEnv is the box with the real Cluster API, kubeadm, IPAM and CAPMOX
// managers, the strict fake PVE with lab1's template, and the sim booting
// its VMs.
type bootEnv struct {
	fake *pvetest.Server
	lab  *config.Lab
	sim  *bootsim.Sim
	box  *box.Box
	kc   *kube.Client
	cl   client.Client
}

func bootBox(t testing.TB, shape labShape) *bootEnv {
	t.Helper()
	box.Require(t, "cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "ipam-in-cluster", "capmox", "kwok")
	ca, err := pki.NewCA("labctl test PVE CA")
	if err != nil {
		t.Fatal(err)
	}
	// The guest agent of image-builder's template answers once the VM
	// runs; the sim answers its cloud-init status.
	fake, lab := pveLabEdited(t, ca, ca, shape.edits(t))
	if shape.secondNode {
		// As big as pv1-1 and empty, so CAPMOX's scheduler, which
		// prefers the node with the most reservable memory, picks it.
		fake.AddNode(secondNode, 29860, 8, "vmbr0")
	}
	e := &bootEnv{fake: fake, lab: lab}
	sim := bootsim.Start(t, fake, bootsim.WithHostedControlPlanes(box.TenantKubeconfigs(func() *kube.Client { return e.kc })))
	e.sim = sim
	img := lab.Images[0]
	fake.AddTemplate("pv1-1", templateID, img.Name, img.TemplateTags()...)
	// With the tags labctl's mgmt up gives it (docs/day2.md), which mgmt
	// down looks for.
	fake.AddVM("pv1-1", lab.Management.VMID, lab.Management.Name, 8192, true, false, "labctl", "labctl-lab-"+lab.Metadata.Name)

	e.startBox(t, shape)
	return e
}

// alive fails the test at once when a box process has exited or a VM
// could not boot: a wait would otherwise run to its timeout.
func (e *bootEnv) alive(t testing.TB) func() {
	return func() {
		t.Helper()
		for name, p := range e.box.Procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("%s exited: %v", name, err)
			}
		}
		if f := e.sim.Failures(); len(f) > 0 {
			t.Fatalf("a VM did not boot: %v", f)
		}
	}
}

// startBox starts a management cluster for the lab: a box with the real
// Cluster API, kubeadm, IPAM and CAPMOX managers, CAPMOX aimed at the
// fake PVE as labctl's stack aims it. A second call is a second,
// separate management cluster (a new VM after 'mgmt up') on the same
// hypervisors.
func (e *bootEnv) startBox(t testing.TB, shape labShape) {
	t.Helper()
	env, args, spec := capmoxProcess(t, e.lab, t.TempDir())
	opts := []box.Option{box.WithProviders("cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "ipam-in-cluster", "capmox"),
		box.WithEnv("capmox", env...), box.WithArgs("capmox", args...), box.WithOperatorSpec("capmox", spec)}
	if shape.tenantPort != 0 {
		// What labctl's stack gives the core provider in a lab with
		// tenants (components: the ClusterTopology gate).
		opts = append(opts, box.WithArgs("cluster-api", "--feature-gates=ClusterTopology=true"))
	}
	b := box.Start(t, opts...)
	cl, err := client.New(b.Env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.box, e.kc, e.cl = b, kube.NewForConfig(b.Env.Config, b.Env.Kubeconfig), cl
}

// labShape is a variant of the test lab (examples/lab.yaml on loopback)
// that bootBox and lab1Lifecycle run.
type labShape struct {
	// secondNode adds Proxmox node pv1-2 (its own local-lvm, no template:
	// the image is built on pv1-1 only) to the fake PVE, to the lab's
	// nodes and to lab1's allowedNodes, as the owner will when pv1-2
	// joins (LAB.md).
	secondNode bool
	// tenantPort, when set, adds examples/lab-tenants.yaml's tenant1 (a
	// Kamaji control plane, its workers on pv1-1 from zero to five) with
	// this port as its controlPlane.port, and runs the core provider with
	// the ClusterTopology gate.
	tenantPort int
	// kvmTenantPort, when set, also adds examples/lab-tenants.yaml's
	// tenant2 (its workers on the KVM hosts kvm1 and kvm2, from zero to
	// three) with this port, those hosts (kvmHosts) and its node image
	// ubuntu-kvm.
	kvmTenantPort int
	// kvmHosts are the test libvirtds that stand for kvm1 and kvm2, each
	// over TLS with the node image placed.
	kvmHosts [2]*libvirttest.Daemon
}

const secondNode = "pv1-2"

// edits are the shape's changes to the test lab's text.
func (s labShape) edits(t testing.TB) [][2]string {
	var out [][2]string
	if s.secondNode {
		out = append(out, [2]string{"        # pv1-2 is being added; list it here and in clusters[].allowedNodes.\n",
			"        - name: pv1-2\n          storage: local-lvm\n          imageStorage: local\n          bridge: vmbr0\n"},
			[2]string{"    allowedNodes:\n      - pv1-1\n", "    allowedNodes:\n      - pv1-1\n      - pv1-2\n"})
	}
	if s.tenantPort != 0 {
		out = append(out, [2]string{"scaleTest:\n", testbed.ExampleTenant(t, "tenant1", s.tenantPort) + "scaleTest:\n"},
			// The tenant ClusterClasses carry the owner's keys, which
			// the stack reads when it renders.
			[2]string{"  sshPublicKeyFile: ~/.ssh/id_ed25519.pub\n", "  sshPublicKeys: [\"" + sshKey + "\"]\n"})
	}
	if s.kvmTenantPort != 0 {
		var hosts string
		for i, d := range s.kvmHosts {
			hosts += fmt.Sprintf("  - name: kvm%d\n    libvirt:\n      uri: test+tls://127.0.0.1:%s/default\n      storagePool: %s\n      network: default\n"+
				"      tls:\n        caFile: %s\n        certFile: %s\n        keyFile: %s\n", i+1, d.TLSPort, kvmStoragePool, d.CAFile, d.CertFile, d.KeyFile)
		}
		out = append(out, [2]string{"scaleTest:\n", testbed.ExampleTenant(t, "tenant2", s.kvmTenantPort) + "scaleTest:\n"},
			[2]string{"\nnetwork:\n", "\n" + hosts + "network:\n"},
			[2]string{"\nclusters:\n", "\n  - name: ubuntu-kvm\n    os: ubuntu-2404\n    hosts: [kvm1, kvm2]\nclusters:\n"})
	}
	return out
}

// labctl cluster create lab1, labctl's own use case, on the box: with the
// real Cluster API, kubeadm and CAPMOX and the sim booting the VM, it
// waits for infrastructure and the initialized control plane, writes the
// kubeconfig (0600) that then works against the workload API server,
// installs Cilium (the stand-in chart from the offline folder, with the
// Helm SDK) and applies the autoscaler. What 'labctl mgmt install' leaves
// for the autoscaler to bind to, the shared ClusterRole, comes from
// labctl's own rendered stack. Then lab1 gains a second pool on a KVM host
// (labctl's own libvirt provider), which the real autoscaler raises from
// zero for pods only it can hold (kvmPoolFromZero), and delete removes
// that pool's objects too.
func TestLab1ClusterCreate(t *testing.T) { lab1Lifecycle(t, labShape{}) }

// The same flow on the lab once pv1-2 joins: two Proxmox nodes, both in
// lab1's allowedNodes, the template on pv1-1 only (node-local disks), and
// the worker pool starting at zero. Every machine must go to pv1-1 (a
// clone onto pv1-2 is refused, so CAPMOX would never get the control
// plane's VM there) and no clone may fail.
func TestLab1ClusterCreateTwoNodes(t *testing.T) { lab1Lifecycle(t, labShape{secondNode: true}) }

// lab1Lifecycle is TestLab1ClusterCreate's run, shared with
// BenchmarkLab1ScaleTest: create, describe, the autoscaler, scale-test
// all, the KVM pool from zero (one shape is enough for it), delete. It
// returns scale-test's report.
func lab1Lifecycle(t testing.TB, shape labShape) *scaletest.Report {
	e := bootBox(t, shape)
	lab := e.lab
	lab1, err := lab.Cluster("lab1")
	if err != nil {
		t.Fatal(err)
	}
	if lab1.Pools[0].Min != 0 || !lab1.Pools[0].Autoscaled() {
		t.Fatalf("the test lab's worker pool must start at zero and be autoscaled: min %d max %d", lab1.Pools[0].Min, lab1.Pools[0].Max)
	}
	if shape.secondNode && !slices.Equal(lab1.AllowedNodes, []string{"pv1-1", secondNode}) {
		t.Fatalf("lab1's allowedNodes %v, want pv1-1 and %s", lab1.AllowedNodes, secondNode)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{sshKey}
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	// labctl's own libvirt provider, for the KVM pool added at the end;
	// installed first, so the autoscaler finds its API group served.
	startLibvirtProvider(ctx, t, e, nil)

	applySharedRole(ctx, t, e)

	io, _, _, errb := ui.Test()
	dir := t.TempDir()
	opts := cluster.Options{IO: io, Lab: lab, Name: "lab1", Mgmt: e.kc,
		KubeconfigDir: dir, Timeout: 6 * time.Minute}
	createCluster(ctx, t, e, opts, errb)

	path := filepath.Join(dir, "lab1.kubeconfig")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("create wrote no kubeconfig: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	wcfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	wcs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := wcs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: bootsim.LabelControlPlane})
	if err != nil {
		t.Fatalf("the written kubeconfig does not reach the workload API: %v", err)
	}
	if len(nodes.Items) != 1 || !strings.HasPrefix(nodes.Items[0].Spec.ProviderID, "proxmox://") {
		t.Errorf("the workload cluster's control-plane Nodes: %v", nodes.Items)
	}
	rel, err := wcs.CoreV1().Secrets(clusterapi.CiliumNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + clusterapi.CiliumRelease + ",status=deployed"})
	if err != nil || len(rel.Items) != 1 {
		t.Errorf("Cilium's Helm release in the workload cluster: %v, %v", rel, err)
	}
	as := autoscalerRunsAsRendered(ctx, t, e, "lab1", wcs)
	describeShowsRealConditions(ctx, t, e, opts, lab1)
	if shape.secondNode {
		vmsOnTemplateNode(t, e, "after create")
	}

	// labctl scale-test lab1 --scenario all, against that autoscaler.
	lab.ScaleTest.Timeouts.ScaleUp, lab.ScaleTest.Timeouts.ScaleDown, lab.ScaleTest.Timeouts.FromZero = "5m", "5m", "5m"
	rep := scaleTestAll(ctx, t, e, lab, "lab1", as)
	scaleTestPassed(t, rep)

	// A second pool, on a KVM host, raised from zero by the same autoscaler.
	if !shape.secondNode {
		kvmPoolFromZero(ctx, t, e, opts, wcs, as)
	}

	// labctl cluster delete lab1 --yes leaves nothing of lab1 behind.
	errb.Reset()
	if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: opts, Yes: true}); err != nil {
		t.Fatalf("labctl cluster delete lab1 --yes: %v\n%s", err, errb.String())
	}
	nothingLeft(ctx, t, e, lab, "lab1")
	if shape.secondNode {
		noCloneFailed(t, e)
	}
	return rep
}

// createCluster runs labctl cluster create as the command does, failing
// the test at once when a box process exits meanwhile; errb is the
// command's stderr (opts.IO's).
func createCluster(ctx context.Context, t testing.TB, e *bootEnv, opts cluster.Options, errb fmt.Stringer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cluster.Create(ctx, opts) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("labctl cluster create %s: %v\n%s\nVM boot failures: %v", opts.Name, err, errb, e.sim.Failures())
			}
			t.Logf("cluster create's output:\n%s", errb)
			return
		case <-time.After(time.Second):
			for name, p := range e.box.Procs {
				if exited, err := p.Exited(); exited {
					t.Fatalf("%s exited: %v", name, err)
				}
			}
		}
	}
}

// scaleTestPassed checks that scale-test's report has each phase named
// (by default those of --scenario all), passed with every milestone
// reached.
func scaleTestPassed(t testing.TB, rep *scaletest.Report, phases ...string) {
	t.Helper()
	if len(phases) == 0 {
		phases = []string{scaletest.PhaseUp, scaletest.PhaseDown, scaletest.PhaseFromZero}
	}
	for _, name := range phases {
		i := slices.IndexFunc(rep.Phases, func(p scaletest.PhaseReport) bool { return p.Name == name })
		if i < 0 {
			t.Errorf("scale-test's report has no phase %q", name)
			continue
		}
		p := rep.Phases[i]
		for _, m := range p.Milestones {
			if !m.Reached {
				t.Errorf("%s: milestone %q not reached", name, m.Name)
			}
		}
		if !p.Pass {
			t.Errorf("%s failed: %s", name, p.Stopped)
		}
	}
}

// vmsOnTemplateNode checks that every VM of lab1 in the fake PVE is on
// pv1-1, the node that holds the template.
func vmsOnTemplateNode(t testing.TB, e *bootEnv, when string) {
	t.Helper()
	n := 0
	for _, v := range e.fake.VMs() {
		if !strings.HasPrefix(v.Name(), "lab1-") {
			continue
		}
		n++
		if v.Node != "pv1-1" {
			t.Errorf("%s: VM %d %s is on %s, want pv1-1, which holds the template", when, v.ID, v.Name(), v.Node)
		}
	}
	if n == 0 {
		t.Errorf("%s: no VM of lab1 in the fake PVE", when)
	}
}

// noCloneFailed checks that the fake PVE refused no clone during the run,
// as it refuses one onto a node that does not hold the template.
func noCloneFailed(t testing.TB, e *bootEnv) {
	t.Helper()
	clones := 0
	for _, r := range e.fake.Requests() {
		if r.Method != "POST" || r.Path != "/nodes/{node}/qemu/{vmid}/clone" {
			continue
		}
		clones++
		if r.Status >= 300 {
			t.Errorf("the fake PVE refused a clone: %d %s", r.Status, r.Raw)
		}
	}
	if clones < 5 {
		t.Errorf("%d clones in the run, want at least 5 (the control plane, 1→3 workers, one from zero)", clones)
	}
}

// scaleTestAll runs labctl scale-test NAME --scenario all -o json as the
// command does (the workload cluster reached with Cluster API's
// kubeconfig Secret) and returns the report it printed.
func scaleTestAll(ctx context.Context, t testing.TB, e *bootEnv, lab *config.Lab, name string, as *runner.Proc) *scaletest.Report {
	t.Helper()
	return scaleTest(ctx, t, e, lab, name, "all", as)
}

// scaleTest runs labctl scale-test NAME --scenario SCENARIO -o json.
func scaleTest(ctx context.Context, t testing.TB, e *bootEnv, lab *config.Lab, name, scenario string, as *runner.Proc) *scaletest.Report {
	t.Helper()
	io, _, out, errb := ui.Test()
	err := scaletest.Command(ctx, scaletest.CommandOptions{
		IO: io, Lab: lab, Cluster: name, Scenario: scenario, Output: "json",
		Mgmt: func(context.Context) (*kube.Client, error) { return e.kc, nil },
		Workload: func(ctx context.Context, name string) (*rest.Config, error) {
			kc, err := cluster.Kubeconfig(ctx, cluster.Options{Mgmt: e.kc, Name: name})
			if err != nil {
				return nil, err
			}
			return cluster.WorkloadConfig(kc, name)
		},
	})
	t.Logf("scale-test's progress:\n%s", errb.String())
	var rep scaletest.Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("scale-test printed no JSON report (%v): %v\n%s", err, jerr, out.String())
	}
	for _, p := range rep.Phases {
		var line []string
		for _, m := range p.Milestones {
			line = append(line, fmt.Sprintf("%s +%.1fs", m.Name, m.AfterSeconds))
		}
		t.Logf("%s: pass %v in %.1fs: %s", p.Name, p.Pass, p.TotalSeconds, strings.Join(line, ", "))
	}
	if err != nil {
		t.Fatalf("labctl scale-test %s --scenario %s: %v\nautoscaler log:\n%s\nVM boot failures: %v", name, scenario, err, runner.Tail(as.Log, 60), e.sim.Failures())
	}
	return &rep
}

// nothingLeft checks what cluster delete of name must leave: in the
// cluster's namespace no Machines, IPAddresses, libvirt objects or
// Secrets; in the fake PVE no VM named after the cluster; and no
// autoscaler process for it. Other clusters may go on in the same box.
func nothingLeft(ctx context.Context, t testing.TB, e *bootEnv, lab *config.Lab, name string) {
	t.Helper()
	ns := clusterapi.Namespace(name)
	// Only the cluster's own: other clusters may live on in the box.
	list := func(group, version, kind string) []string {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: kind + "List"})
		if err := e.cl.List(ctx, l, client.InNamespace(ns)); meta.IsNoMatchError(err) {
			return nil // a kind this box does not serve (no libvirt provider)
		} else if err != nil {
			t.Fatalf("listing %s: %v", kind, err)
		}
		var names []string
		for _, u := range l.Items {
			names = append(names, u.GetNamespace()+"/"+u.GetName())
		}
		return names
	}
	if m := list("cluster.x-k8s.io", "v1beta2", "Machine"); len(m) > 0 {
		t.Errorf("Machines left after delete: %v", m)
	}
	if a := list("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress"); len(a) > 0 {
		t.Errorf("IPAddresses left after delete: %v", a)
	}
	// Cluster API owns neither the KVM pool's LibvirtCluster nor its
	// LibvirtMachines' hosts' Secret: labctl's delete removes them.
	if lc := list("infrastructure.labctl.dev", "v1alpha1", "LibvirtCluster"); len(lc) > 0 {
		t.Errorf("LibvirtClusters left after delete: %v", lc)
	}
	if lm := list("infrastructure.labctl.dev", "v1alpha1", "LibvirtMachine"); len(lm) > 0 {
		t.Errorf("LibvirtMachines left after delete: %v", lm)
	}
	for _, v := range e.fake.VMs() {
		if v.ID != lab.Management.VMID && v.ID != templateID && strings.HasPrefix(v.Name(), name+"-") {
			t.Errorf("VM %d %s left in the fake PVE after delete", v.ID, v.Name())
		}
	}
	// Kamaji's Secrets beside a tenant's TenantControlPlane are its
	// dependents: the garbage collector removes them after it, shortly
	// after delete returns. Anything else must be gone already.
	var secrets corev1.SecretList
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if err := e.cl.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		owned := 0
		for _, s := range secrets.Items {
			for _, o := range s.OwnerReferences {
				if o.Kind == clusterapi.TenantControlPlaneGVK.Kind {
					owned++
					break
				}
			}
		}
		if owned == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range secrets.Items {
		t.Errorf("Secret %s/%s (type %s, owners %v) left after delete", ns, s.Name, s.Type, s.OwnerReferences)
	}
	if p := e.box.Runner.Proc(ns, clusterapi.AutoscalerName); p != nil && p.Running() {
		t.Errorf("the autoscaler still runs after delete")
	}
}

// autoscalerRunsAsRendered waits for the runner to run labctl's autoscaler
// Deployment as the real cluster-autoscaler binary and checks the process
// got exactly the Deployment's command and args, but for the runner's
// documented departures (runner package doc): the mounted workload
// kubeconfig's path mapped into the process's folder (the file holds
// Cluster API's kubeconfig Secret), --address (the metrics listener,
// not rendered) set to a free loopback port, and --cloud-config (not
// rendered: the management cluster in-cluster) set to the box's
// kubeconfig, as there is no in-cluster config here (runner.Image's
// InClusterFlag). The autoscaler is working,
// not only started, once it holds its lease and writes its status
// ConfigMap in the workload cluster's kube-system, naming the cluster's worker
// pool, which it finds in the management cluster.
func autoscalerRunsAsRendered(ctx context.Context, t testing.TB, e *bootEnv, name string, wcs kubernetes.Interface) *runner.Proc {
	t.Helper()
	ns := clusterapi.Namespace(name)
	var dep appsv1.Deployment
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: clusterapi.AutoscalerName}, &dep); err != nil {
		t.Fatalf("the autoscaler Deployment: %v", err)
	}
	alive := func() {
		t.Helper()
		for name, p := range e.box.Procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("%s exited: %v", name, err)
			}
		}
	}
	var p *runner.Proc
	waitUntil(ctx, t, 2*time.Minute, "runner process for the autoscaler Deployment", alive, func() (bool, string) {
		p = e.box.Runner.Proc(ns, clusterapi.AutoscalerName)
		return p != nil && p.Running(), fmt.Sprint(p)
	})
	c := dep.Spec.Template.Spec.Containers[0]
	if p.Image.Binary != "cluster-autoscaler" || len(c.Command) == 0 || filepath.Base(c.Command[0]) != p.Image.Binary {
		t.Fatalf("the Deployment's command %q runs as %q, want the real cluster-autoscaler", c.Command, p.Image.Binary)
	}
	want := append(append([]string{}, c.Command[1:]...), c.Args...)
	var sec corev1.Secret
	if err := e.cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: clusterapi.KubeconfigSecret(name)}, &sec); err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(p.Args)
	has := func(flag string) bool {
		return slices.ContainsFunc(want, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
	}
	if n := len(got); n >= 2 && n == len(want)+2 && !has("--address") && !has("--cloud-config") &&
		strings.HasPrefix(got[n-2], "--address=127.0.0.1:") && got[n-1] == "--cloud-config="+e.box.Env.Kubeconfig {
		got = got[:n-2]
	}
	if len(got) != len(want) {
		t.Fatalf("the autoscaler runs with %q, want the Deployment's %q (and --address on loopback)", p.Args, want)
	}
	for i := range want {
		if got[i] == want[i] {
			continue
		}
		flag, path, _ := strings.Cut(got[i], "=")
		if flag+"="+"/etc/kubernetes/workload/value" == want[i] && strings.HasSuffix(path, "/etc/kubernetes/workload/value") {
			if data, err := os.ReadFile(path); err != nil || !bytes.Equal(data, sec.Data["value"]) {
				t.Errorf("%s: the mapped workload kubeconfig is not Cluster API's Secret (%v)", got[i], err)
			}
			continue
		}
		t.Errorf("the autoscaler's argument %d is %q, the Deployment's is %q", i, got[i], want[i])
	}
	pool := clusterapi.PoolMachineDeploymentName(name, config.DefaultPool)
	waitUntil(ctx, t, 2*time.Minute, "the autoscaler's status ConfigMap naming "+pool, alive, func() (bool, string) {
		cm, err := wcs.CoreV1().ConfigMaps("kube-system").Get(ctx, "cluster-autoscaler-status", metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("%v; autoscaler log:\n%s", err, runner.Tail(p.Log, 20))
		}
		return strings.Contains(cm.Data["status"], pool), cm.Data["status"]
	})
	if !p.Running() {
		t.Fatalf("the autoscaler exited:\n%s", runner.Tail(p.Log, 30))
	}
	t.Logf("the real cluster-autoscaler runs with %q", p.Args)
	return p
}

// BenchmarkLab1ScaleTest runs TestLab1ClusterCreate's lifecycle and
// reports scale-test's timeline against the real cluster-autoscaler, in
// seconds: for scale-up 1→3 and scale-from-zero, pods Pending →
// MachineDeployment replicas raised (the autoscaler's decision), → Node
// Ready, → pods Running; for scale-down, the workload removed (the nodes
// idle) → replicas lowered. docs/scale-test.md records the figures; run
// with -run '^$' -bench BenchmarkLab1ScaleTest -benchtime=1x.
func BenchmarkLab1ScaleTest(b *testing.B) {
	for b.Loop() {
		rep := lab1Lifecycle(b, labShape{})
		for _, p := range rep.Phases {
			at := map[string]float64{}
			for _, m := range p.Milestones {
				at[m.Name] = m.AfterSeconds
			}
			unit := map[string]string{scaletest.PhaseUp: "up", scaletest.PhaseDown: "down", scaletest.PhaseFromZero: "zero"}[p.Name]
			if p.Name == scaletest.PhaseDown {
				b.ReportMetric(at[scaletest.MDScaledDown]-at[scaletest.WorkloadRemoved], "s-idle-to-lowered/"+unit)
				continue
			}
			for _, m := range []string{scaletest.MDScaledUp, scaletest.NodeReady, scaletest.PodsRunning} {
				name := map[string]string{scaletest.MDScaledUp: "raised", scaletest.NodeReady: "node-ready", scaletest.PodsRunning: "pods-running"}[m]
				b.ReportMetric(at[m]-at[scaletest.PodPending], "s-pending-to-"+name+"/"+unit)
			}
		}
	}
}

// describeShowsRealConditions runs labctl cluster describe lab1 (its text
// and its -o json data) after create and checks what the user sees
// against the objects the real controllers wrote: every object of the
// tree shows the status, reason and message of its own Ready condition
// (Available where it has none, as clusterctl chooses), read back from the
// management API server; once the cluster is up, the Cluster, its
// infrastructure, the control plane and its machine, the worker pool and
// the autoscaler are all True; the pool, starting at zero, shows no
// replicas and its bounds.
func describeShowsRealConditions(ctx context.Context, t testing.TB, e *bootEnv, opts cluster.Options, lab1 *config.Cluster) {
	t.Helper()
	gvks := map[string]schema.GroupVersionKind{
		"Cluster": clusterapi.ClusterGVK, "MachineDeployment": clusterapi.MachineDeploymentGVK, "Machine": clusterapi.MachineGVK,
		"KubeadmControlPlane": clusterapi.KubeadmControlPlaneGVK,
		"KubeadmConfig":       clusterapi.KubeadmConfigTemplateGVK.GroupVersion().WithKind("KubeadmConfig"),
		"ProxmoxCluster":      clusterapi.ProxmoxClusterGVK, "ProxmoxMachine": clusterapi.ProxmoxClusterGVK.GroupVersion().WithKind("ProxmoxMachine"),
		"Deployment": appsv1.SchemeGroupVersion.WithKind("Deployment"),
	}
	// The condition each object must show True once the cluster is up.
	wantTrue := map[string]string{
		"Cluster": "Available", "ProxmoxCluster": "Ready", "KubeadmControlPlane": "Available", "Machine": "Ready",
		"ProxmoxMachine": "Ready", "KubeadmConfig": "Ready", "MachineDeployment": "Available", "Deployment": "Available",
	}
	var d *cluster.Description
	waitUntil(ctx, t, 3*time.Minute, "cluster describe lab1 showing the real conditions, all True", func() {}, func() (bool, string) {
		var err error
		if d, err = cluster.Describe(ctx, opts); err != nil {
			return false, err.Error()
		}
		var problems []string
		seen := map[string]bool{}
		var walk func(n *cluster.Node)
		walk = func(n *cluster.Node) {
			for _, c := range n.Children {
				walk(c)
			}
			if n.Kind == "Workers" {
				return
			}
			seen[n.Kind] = true
			gvk, ok := gvks[n.Kind]
			if !ok {
				problems = append(problems, "unexpected "+n.Kind+"/"+n.Name)
				return
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := e.cl.Get(ctx, types.NamespacedName{Namespace: "lab1", Name: n.Name}, u); err != nil {
				problems = append(problems, err.Error())
				return
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			real := map[string]map[string]any{}
			for _, c := range conds {
				m, _ := c.(map[string]any)
				typ, _ := m["type"].(string)
				real[typ] = m
			}
			// The autoscaler's row is its Deployment's Available.
			which := "Ready"
			if n.Kind == "Deployment" || real[which] == nil {
				which = "Available"
			}
			r := real[which]
			if r == nil {
				problems = append(problems, fmt.Sprintf("%s/%s has no %s condition: %v", n.Kind, n.Name, which, conds))
				return
			}
			msg, _ := r["message"].(string)
			if n.Condition != which || n.Ready != r["status"] || n.Reason != r["reason"] || n.Message != msg {
				problems = append(problems, fmt.Sprintf("%s/%s shows %s %s %s %q; the object's %s is %v %v %q",
					n.Kind, n.Name, n.Condition, n.Ready, n.Reason, n.Message, which, r["status"], r["reason"], msg))
			}
			if want := wantTrue[n.Kind]; n.Condition != want || n.Ready != "True" {
				problems = append(problems, fmt.Sprintf("%s/%s: %s is %s (%s: %s)", n.Kind, n.Name, n.Condition, n.Ready, n.Reason, n.Message))
			}
		}
		walk(d.Tree)
		for kind := range wantTrue {
			if !seen[kind] {
				problems = append(problems, "no "+kind+" in the tree")
			}
		}
		return len(problems) == 0, strings.Join(problems, "; ")
	})

	md := d.Tree.Find("MachineDeployment", clusterapi.PoolMachineDeploymentName("lab1", lab1.Pools[0].Name))
	if want := fmt.Sprintf("0/0 ready, desired 0, autoscaled %d-%d", lab1.Pools[0].Min, lab1.Pools[0].Max); md == nil || md.Details != want || len(md.Children) != 0 {
		t.Errorf("the worker pool after create: %+v, want %q and no Machine", md, want)
	}
	if d.Phase != "Provisioned" || d.Endpoint != lab1.ControlPlane.Endpoint+":6443" {
		t.Errorf("describe's cluster line: phase %q endpoint %q, want Provisioned at %s:6443", d.Phase, d.Endpoint, lab1.ControlPlane.Endpoint)
	}

	// The text the command prints: a row per object with what it showed.
	var text bytes.Buffer
	if err := cluster.DescribeText(opts.IO, &text, d); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	if !strings.HasPrefix(lines[0], "Cluster lab1/lab1  Provisioned  endpoint "+d.Endpoint) {
		t.Errorf("describe's first line %q", lines[0])
	}
	var walk func(n *cluster.Node)
	walk = func(n *cluster.Node) {
		label := n.Kind + "/" + n.Name
		if n.Role != "" {
			label = n.Role + " - " + label
		}
		if n.Kind != "Workers" && !slices.ContainsFunc(lines, func(l string) bool {
			i := strings.Index(l, label)
			if i < 0 || i > 0 && (l[i-1] >= 'A' && l[i-1] <= 'Z' || l[i-1] >= 'a' && l[i-1] <= 'z') {
				return false // not the row, or ProxmoxMachine/x for Machine/x
			}
			f := strings.Fields(l[i+len(label):])
			return len(f) >= 2 && f[0] == n.Ready && f[1] == n.Reason
		}) {
			t.Errorf("describe's text has no row %q with %s %s:\n%s", label, n.Ready, n.Reason, text.String())
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(d.Tree)
	t.Logf("labctl cluster describe lab1:\n%s", text.String())
}
