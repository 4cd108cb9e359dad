package box_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/cmd"
	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/testing/bootsim"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/nodeimage"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/ui"
)

// The KVM host of the backup test: a test libvirtd of its own (libvirt's
// test driver over TLS on loopback), its storage pool and node image.
const (
	kvmStoragePool = "labctl"
	kvmImageVolume = "node.qcow2"
)

// Box A runs lab1 with a Proxmox pool (the real CAPMOX against the fake
// PVE, the sim booting its VMs) and a KVM pool (labctl's libvirt provider
// against a test libvirtd), one VM each plus the control plane's. 'labctl
// mgmt backup' (the command, as a user runs it) writes the file; box A's
// controllers stop, as when the management VM is lost. Box B is a second,
// separate API server with the same real controllers and what 'mgmt
// install' puts there; 'labctl mgmt restore' puts the file onto it. The
// real controllers on B then reconcile lab1 with no VM created or deleted:
// counted at the fake PVE's API (clones, deletes) and at the libvirtd's
// RPC (domain define, create, destroy, undefine) from the moment of the
// backup, and the hypervisors hold the same VMs, by VMID and domain UUID.
// Then 'labctl scale-test lab1' passes from B against B's autoscaler.
//
// Last, 'mgmt down' on B (lab1 alive, its controllers running) refuses
// and names lab1; 'mgmt down --cascade' leaves no VM of lab1 on either
// hypervisor, then deletes the management VM.
//
// The KVM worker's Node is registered by the test (kubeletFor): no sim
// boots a libvirt domain yet; the Proxmox VMs' Nodes are the sim's.
func TestBackupRestoreOntoANewBox(t *testing.T) {
	start := time.Now()
	e := bootBox(t, labShape{})
	d := libvirttest.StartPrivate(t)
	images := placeNodeImage(t, d)
	lab := e.lab
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{sshKey}
	lab.ScaleTest.Timeouts.ScaleUp, lab.ScaleTest.Timeouts.ScaleDown, lab.ScaleTest.Timeouts.FromZero = "5m", "5m", "5m"
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	withKVMPool(t, lab, d)
	labFile := writeLab(t, lab)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()

	// Box A: lab1 as 'labctl cluster create' makes it.
	rpcA := &libvirttest.Cutter{}
	_, stopProviderA := startLibvirtProvider(ctx, t, e, testHost(rpcA))
	applySharedRole(ctx, t, e)
	io, _, _, errb := ui.Test()
	opts := cluster.Options{IO: io, Lab: lab, Name: "lab1", Mgmt: e.kc,
		KubeconfigDir: t.TempDir(), Timeout: 6 * time.Minute}
	if err := cluster.Create(ctx, opts); err != nil {
		t.Fatalf("labctl cluster create lab1: %v\n%s\nVM boot failures: %v", err, errb.String(), e.sim.Failures())
	}
	wcs := workloadClient(ctx, t, e)
	kubeletFor(ctx, t, e, wcs, 1)
	machinesRunning(ctx, t, e, 2)
	t.Logf("box A: lab1 up with its control plane and one KVM worker, %.0fs in", time.Since(start).Seconds())

	pveVMs, domains := pveVMsOf(e), domainsOf(t, images)
	if len(pveVMs) != 1 || len(domains) != 1 {
		t.Fatalf("before the backup: VMs of lab1 %v on the fake PVE and domains %v on the libvirtd, want one of each", pveVMs, domains)
	}
	pveAtBackup := len(e.fake.Requests())

	// The backup, through the command.
	t.Setenv("LABCTL_BACKUP_PASSPHRASE", "correct horse battery staple")
	file := filepath.Join(t.TempDir(), "lab.age")
	if code, out := labctl(t, "-c", labFile, "--kubeconfig", e.box.Env.Kubeconfig, "mgmt", "backup", file); code != 0 {
		t.Fatalf("labctl mgmt backup: exit %d\n%s", code, out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the backup file: %v, %v", fi, err)
	}

	// The management VM is lost: box A's controllers stop for good.
	e.box.StopControllers()
	stopProviderA()
	t.Logf("box A stopped, %.0fs in; libvirt calls from A's provider: %s", time.Since(start).Seconds(), vmCalls(rpcA))

	// Box B: a new management cluster with what 'mgmt install' puts there.
	b := &bootEnv{fake: e.fake, lab: lab, sim: e.sim}
	b.startBox(t, labShape{})
	rpcB := &libvirttest.Cutter{}
	_, _ = startLibvirtProvider(ctx, t, b, testHost(rpcB))
	applySharedRole(ctx, t, b)
	restoreStart := time.Now()
	if code, out := labctl(t, "-c", labFile, "--kubeconfig", b.box.Env.Kubeconfig, "mgmt", "restore", "--timeout", "6m", file); code != 0 {
		t.Fatalf("labctl mgmt restore: exit %d\n%s", code, out)
	} else {
		t.Logf("labctl mgmt restore (%.0fs):\n%s", time.Since(restoreStart).Seconds(), out)
	}
	machinesRunning(ctx, t, b, 2)
	as := autoscalerRunsAsRendered(ctx, t, b, "lab1", wcs)
	// Give the providers a few more reconciles: a clone or a define
	// would come now if they did not recognise the VMs.
	time.Sleep(15 * time.Second)

	clones, deletes := pveWrites(e.fake.Requests()[pveAtBackup:])
	t.Logf("after the restore: fake PVE clones %d, deletes %d; libvirt calls from B's provider: %s", clones, deletes, vmCalls(rpcB))
	if clones != 0 || deletes != 0 {
		t.Errorf("on B, %d VM(s) cloned and %d deleted on the fake PVE; want 0 and 0", clones, deletes)
	}
	if n := vmCalls(rpcB); n.total() != 0 {
		t.Errorf("on B, the libvirt provider changed domains: %s; want none", n)
	}
	if got := pveVMsOf(e); !slices.Equal(got, pveVMs) {
		t.Errorf("VMs of lab1 on the fake PVE: %v before the backup, %v after the restore", pveVMs, got)
	}
	if got := domainsOf(t, images); !slices.Equal(got, domains) {
		t.Errorf("domains on the libvirtd: %v before the backup, %v after the restore", domains, got)
	}

	// labctl scale-test lab1, from B.
	rep := scaleTestAll(ctx, t, b, lab, "lab1", as)
	for _, p := range rep.Phases {
		if !p.Pass {
			t.Errorf("scale-test from B: %s failed: %s", p.Name, p.Stopped)
		}
	}
	t.Logf("scale-test from B passed, %.0fs in", time.Since(start).Seconds())

	// mgmt down on B: refused while lab1 lives, then --cascade.
	code, out := labctl(t, "-c", labFile, "--kubeconfig", b.box.Env.Kubeconfig, "mgmt", "down", "--yes")
	if code == 0 || !strings.Contains(out, "Cluster lab1/lab1") || !strings.Contains(out, "refusing") {
		t.Fatalf("labctl mgmt down with lab1 alive: exit %d, want a refusal naming lab1:\n%s", code, out)
	}
	if !slices.ContainsFunc(e.fake.VMs(), func(v pvetest.VM) bool { return v.ID == lab.Management.VMID }) {
		t.Fatalf("the refused mgmt down deleted the management VM")
	}
	downStart := time.Now()
	if code, out := labctl(t, "-c", labFile, "--kubeconfig", b.box.Env.Kubeconfig, "mgmt", "down", "--cascade", "--yes", "--timeout", "5m"); code != 0 {
		t.Fatalf("labctl mgmt down --cascade: exit %d\n%s\nVM boot failures: %v", code, out, e.sim.Failures())
	} else {
		t.Logf("labctl mgmt down --cascade (%.0fs):\n%s", time.Since(downStart).Seconds(), out)
	}
	for _, v := range e.fake.VMs() {
		if v.ID != templateID {
			t.Errorf("VM %d %s left on the fake PVE after mgmt down --cascade", v.ID, v.Name())
		}
	}
	if left := domainsOf(t, images); len(left) != 0 {
		t.Errorf("domains left on the libvirtd after mgmt down --cascade: %v", left)
	}
	// CAPMOX v0.9.0 finds a ProxmoxMachine's VM on the node its status
	// names (find.go), and a moved ProxmoxMachine has no status yet: it
	// asks for /nodes//status once, a real PVE answers 400, as the fake
	// does, and CAPMOX then finds the VM by its VMID. Only that request
	// is expected to be one a real PVE rejects.
	for _, v := range e.fake.TakeViolations() {
		if strings.HasPrefix(v, "GET /api2/json/nodes//status:") {
			t.Logf("CAPMOX on B before it knew the VM's node (a real PVE rejects it too): %s", v)
			continue
		}
		t.Errorf("pvetest: a real PVE would reject this request: %s", v)
	}
	t.Logf("the whole check: %.0fs", time.Since(start).Seconds())
}

// withKVMPool gives lab1 a KVM pool beside its Proxmox one, on host kvm1,
// the test libvirtd d over TLS, with one worker from the start.
func withKVMPool(t *testing.T, lab *config.Lab, d *libvirttest.Daemon) {
	t.Helper()
	lab.Hypervisors = append(lab.Hypervisors, config.Hypervisor{Name: "kvm1", Libvirt: &config.Libvirt{
		URI: "test+tls://127.0.0.1:" + d.TLSPort + "/default", StoragePool: kvmStoragePool, Network: "default",
		TLS: &config.LibvirtTLS{CAFile: d.CAFile, CertFile: d.CertFile, KeyFile: d.KeyFile},
	}})
	c := &lab.Clusters[0]
	if len(c.Pools) != 1 || c.Pools[0].Name != config.DefaultPool {
		t.Fatalf("lab1 has pools %v, want its one default pool from workers", c.Pools)
	}
	c.Pools = append(c.Pools,
		config.Pool{Name: kvmPool, Hypervisors: []string{"kvm1"}, Min: 1, Max: 2, Size: config.Size{CPUs: 2, Memory: "2Gi", Disk: "10Gi"},
			Template: &config.Template{Volume: kvmImageVolume}})
	// The test driver's host has 3 GiB; as in the provider's own tests.
	c.MemoryAdjustment = 1000
	if errs := config.Validate(lab); len(errs) > 0 {
		t.Fatalf("the lab with a KVM pool on the test libvirtd does not validate: %v", errs)
	}
}

// writeLab writes the lab as a lab.yaml (0600) for the commands to read.
func writeLab(t *testing.T, lab *config.Lab) string {
	t.Helper()
	data, err := config.Marshal(lab)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// labctl runs the labctl command in-process, as a user's shell would with
// its output redirected, and returns its exit code and output.
func labctl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	io, _, out, _ := ui.Test()
	io.Err = out
	code := cmd.Run(t.Context(), cmdutil.New(io, &cmdutil.Settings{}), args)
	return code, out.String()
}

// testHost is how the provider reaches a test libvirtd: the test driver
// has no volume streams, so seed uploads are read and dropped; every
// connection's calls are counted by rpc.
func testHost(rpc *libvirttest.Cutter) func(*controller.Reconcilers) {
	return func(r *controller.Reconcilers) {
		opts := func(_ string, o *libvirt.Options) {
			o.Upload = func(_ context.Context, _ string, rd io.Reader, _ int64) error {
				_, err := io.Copy(io.Discard, rd)
				return err
			}
			o.WrapConn = rpc.Wrap
		}
		r.Machine.Hosts.Options, r.Cluster.Hosts.Options = opts, opts
	}
}

// libvirt's RPC procedures that make or remove a domain
// (src/remote/remote_protocol.x).
var domainProcs = map[uint32]string{
	9: "create", 196: "create", 10: "create",
	11: "define", 350: "define",
	12: "destroy", 234: "destroy",
	35: "undefine", 231: "undefine",
}

type procCount map[string]int

func (c procCount) total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func (c procCount) String() string {
	return fmt.Sprintf("define %d, create %d, destroy %d, undefine %d", c["define"], c["create"], c["destroy"], c["undefine"])
}

func vmCalls(rpc *libvirttest.Cutter) procCount {
	out := procCount{}
	for _, p := range rpc.Procedures() {
		if name, ok := domainProcs[p]; ok {
			out[name]++
		}
	}
	return out
}

// pveWrites counts the clones and VM deletes among the fake PVE's requests.
func pveWrites(reqs []pvetest.Request) (clones, deletes int) {
	for _, r := range reqs {
		switch {
		case r.Method == http.MethodPost && r.Path == "/nodes/{node}/qemu/{vmid}/clone":
			clones++
		case r.Method == http.MethodDelete && r.Path == "/nodes/{node}/qemu/{vmid}":
			deletes++
		}
	}
	return clones, deletes
}

// pveVMsOf lists lab1's VMs on the fake PVE, as "VMID name".
func pveVMsOf(e *bootEnv) []string {
	var out []string
	for _, v := range e.fake.VMs() {
		if strings.HasPrefix(v.Name(), "lab1-") {
			out = append(out, fmt.Sprintf("%d %s", v.ID, v.Name()))
		}
	}
	slices.Sort(out)
	return out
}

// domainsOf lists lab1's domains on the test libvirtd, as "UUID name".
func domainsOf(t *testing.T, drv *libvirt.Driver) []string {
	t.Helper()
	vms, err := drv.ListVMs(t.Context(), "lab1/lab1")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vms {
		out = append(out, v.UUID+" "+v.Name)
	}
	slices.Sort(out)
	return out
}

// placeNodeImage puts the node image into the KVM host's pool as 'labctl
// image build' does (EnsureImage from a server on loopback, checked by
// sha256), and returns the driver, to look at the host's domains.
func placeNodeImage(t *testing.T, d *libvirttest.Daemon) *libvirt.Driver {
	t.Helper()
	return nodeimage.Place(t, d, "kvm1", kvmStoragePool, kvmImageVolume)
}

// applySharedRole applies what 'mgmt install' leaves for the
// autoscalers to bind to: labctl's shared ClusterRole, from its rendered
// stack.
func applySharedRole(ctx context.Context, t testing.TB, e *bootEnv) {
	t.Helper()
	role := applyStackPart(ctx, t, e, "", func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "ClusterRole" && o.GetName() == clusterapi.SharedClusterRole
	})
	if len(role) != 1 {
		t.Fatalf("labctl's management stack renders %d ClusterRoles %s, want 1", len(role), clusterapi.SharedClusterRole)
	}
}

// workloadClient reaches lab1's workload cluster with Cluster API's
// kubeconfig Secret.
func workloadClient(ctx context.Context, t testing.TB, e *bootEnv) kubernetes.Interface {
	t.Helper()
	kc, err := cluster.Kubeconfig(ctx, cluster.Options{Mgmt: e.kc, Name: "lab1"})
	if err != nil {
		t.Fatal(err)
	}
	return clientOf(t, kc)
}

// clientOf is a client of the workload cluster kubeconfig kc reaches.
func clientOf(t testing.TB, kc []byte) kubernetes.Interface {
	t.Helper()
	cfg, err := kube.RESTConfigFromKubeconfig(kc, kube.Origin{Kubeconfig: "of a workload cluster in the box", Status: "the box's logs"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubeletFor stands in for the KVM workers' kubelets: once the provider
// has made a domain and set its LibvirtMachine's providerID, it registers
// the Node kubeadm join would (the machine's name, that providerID, the
// pool's label, the VM's size), marked for kwok, which keeps it Ready.
func kubeletFor(ctx context.Context, t *testing.T, e *bootEnv, wcs kubernetes.Interface, n int) {
	t.Helper()
	sch, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	lcl, err := client.New(e.box.Env.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	var lms []v1alpha1.LibvirtMachine
	waitUntil(ctx, t, 4*time.Minute, fmt.Sprintf("%d KVM machine(s) provisioned", n), func() {}, func() (bool, string) {
		var l v1alpha1.LibvirtMachineList
		if err := lcl.List(ctx, &l, client.InNamespace("lab1")); err != nil {
			return false, err.Error()
		}
		lms = nil
		var states []string
		for _, lm := range l.Items {
			if ptr.Deref(lm.Status.Initialization.Provisioned, false) && lm.Spec.ProviderID != "" {
				lms = append(lms, lm)
			}
			states = append(states, lm.Name+": "+fmt.Sprint(lm.Status.Conditions))
		}
		return len(lms) == n, strings.Join(states, "; ")
	})
	for _, lm := range lms {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: lm.Name, Labels: map[string]string{"labctl.dev/pool": kvmPool},
				Annotations: map[string]string{bootsim.KwokAnnotation: "fake"}},
			Spec: corev1.NodeSpec{ProviderID: lm.Spec.ProviderID},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1948Mi"), corev1.ResourcePods: resource.MustParse("110")},
			},
		}
		if _, err := wcs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("registering the KVM worker's Node %s: %v", lm.Name, err)
		}
	}
}

// machinesRunning waits until lab1 has n Machines, all Running with a
// Node, on the management cluster e.
func machinesRunning(ctx context.Context, t *testing.T, e *bootEnv, n int) {
	t.Helper()
	alive := func() {
		t.Helper()
		for name, p := range e.box.Procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("%s exited: %v", name, err)
			}
		}
	}
	waitUntil(ctx, t, 6*time.Minute, fmt.Sprintf("%d Machines of lab1 Running with their Nodes", n), alive, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(clusterapi.MachineGVK.GroupVersion().WithKind("MachineList"))
		if err := e.cl.List(ctx, list, client.InNamespace("lab1")); err != nil {
			return false, err.Error()
		}
		var states []string
		running := 0
		for _, m := range list.Items {
			phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
			node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
			if phase == "Running" && node != "" {
				running++
			}
			states = append(states, fmt.Sprintf("%s %s node %q", m.GetName(), phase, node))
		}
		// The libvirt provider's say, for a machine that does not run.
		for _, gvk := range []schema.GroupVersionKind{clusterapi.LibvirtMachineGVK, clusterapi.LibvirtClusterGVK} {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := e.cl.List(ctx, l, client.InNamespace("lab1")); err == nil {
				for _, o := range l.Items {
					conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
					states = append(states, fmt.Sprintf("%s %s: %v", gvk.Kind, o.GetName(), conds))
				}
			}
		}
		return running == n && len(list.Items) == n, strings.Join(states, "; ")
	})
}
