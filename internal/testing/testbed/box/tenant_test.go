package box_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/cmd"
	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/nodeimage"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// labctl cluster create tenant1, examples/lab-tenants.yaml's tenant on
// Proxmox, on the box: the real Cluster API (its topology controller
// makes the tenant from labctl's ClusterClass, as 'mgmt install' applies
// it), Kamaji and its provider (the TenantControlPlane's three processes
// run by the runner, on a DataStore standing in for the kamaji-etcd
// chart's), CAPMOX on the fake PVE, the in-cluster IPAM, the kubeadm
// bootstrap provider and cluster-autoscaler 1.35.0. The tenant's API
// answers at the management VM's address and the tenant's port, as k3s's
// ServiceLB publishes it (the runner's stand-in); the sim's workers join
// it there with the bootstrap token the kubeadm bootstrap provider made
// in the tenant, after kubeadm's token discovery against its
// cluster-info. CoreDNS is labctl's, at a priority below the
// autoscaler's cutoff. Then scale-test --scenario all passes against the
// tenant from zero workers, back down to zero with CoreDNS on the last
// worker. Beside it on the same datastore, each under its own prefix:
// tenant2, the example's tenant on the KVM hosts (two test libvirtds,
// labctl's libvirt provider), and tenant3, made by kubectl alone from
// the manifest 'cluster create tenant3 --dry-run -o yaml' printed.
// Deleting each leaves no TenantControlPlane, no key under its prefix in
// the datastore, no VM and no IPAddress of it, while the others go on.
func TestTenantClusterCreateOnProxmox(t *testing.T) {
	const name = "tenant1"
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	e, etcd := tenantBox(ctx, t, true)
	lab := e.lab
	tenant, err := lab.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	if !tenant.Kamaji() || tenant.Pools[0].Min != 0 || !tenant.Pools[0].Autoscaled() {
		t.Fatalf("the test lab's %s must be a Kamaji tenant whose pool starts at zero, autoscaled", name)
	}
	t1 := createTenant(ctx, t, e, name, config.PlatformProxmox)
	wcs := t1.wcs

	// tenant2, on the KVM hosts, beside it on the same datastore: its
	// LibvirtCluster, which labctl's libvirt provider finds ready on both
	// test libvirtds, gets the tenant's endpoint from Kamaji's provider.
	// Its pool rests at zero.
	t2 := createTenant(ctx, t, e, "tenant2", config.PlatformKVM)
	endpointPatched(ctx, t, e.cl, schema.GroupVersionKind{Group: "infrastructure.labctl.dev", Version: "v1alpha1", Kind: "LibvirtCluster"},
		clusterapi.Namespace("tenant2"), "tenant2", lab.Management.IP, t2.port)
	t3 := kubectlTenant(ctx, t, e)
	schemas := map[string]bool{}
	for _, ct := range []createdTenant{t1, t2, t3} {
		if ct.store != components.KamajiDataStore || schemas[ct.schema] {
			t.Errorf("%s's datastore: %s, schema %q; want %s, under a schema of its own", ct.opts.Name, ct.store, ct.schema, components.KamajiDataStore)
		}
		schemas[ct.schema] = true
	}

	defer func() {
		if !t.Failed() {
			return
		}
		// What ran where, for a scale-down that did not happen.
		pods, err := wcs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("the tenant's pods: %v", err)
			return
		}
		for _, p := range pods.Items {
			prio := "unset"
			if p.Spec.Priority != nil {
				prio = strconv.Itoa(int(*p.Spec.Priority))
			}
			t.Logf("tenant pod %s/%s on %q, %s, priority %s (%q)", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, prio, p.Spec.PriorityClassName)
		}
		if nodes, err := wcs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err == nil {
			for _, n := range nodes.Items {
				t.Logf("tenant node %s (%s), deleting %v", n.Name, n.Spec.ProviderID, n.DeletionTimestamp != nil)
			}
		}
	}()
	// scale-test tenant1 --scenario all against the tenant's autoscaler,
	// from zero workers: up, back down to zero with CoreDNS on the last
	// worker, and up from zero again.
	if n, err := wcs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(n.Items) != 0 {
		t.Fatalf("the tenant's Nodes before the scale test: %v, %v; want none (its pool starts at zero)", n, err)
	}
	as := autoscalerRunsAsRendered(ctx, t, e, name, wcs)
	lab.ScaleTest.Timeouts.ScaleUp, lab.ScaleTest.Timeouts.ScaleDown, lab.ScaleTest.Timeouts.FromZero = "5m", "5m", "5m"
	scaleTestPassed(t, scaleTestAll(ctx, t, e, lab, name, as))
	// The worker scale-from-zero raised (it stays for
	// --scale-down-delay-after-add) runs CoreDNS: the pod the scale-down
	// above had to let go of, on the last worker, was a real one.
	waitUntil(ctx, t, time.Minute, "CoreDNS on the tenant's worker", func() {}, func() (bool, string) {
		pods, err := wcs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprintf("%v, %v", pods, err)
		}
		p := pods.Items[0]
		return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("pod %s on %q, %s", p.Name, p.Spec.NodeName, p.Status.Phase)
	})

	deleteTenant(ctx, t, e, etcd, t3)
	deleteTenant(ctx, t, e, etcd, t2)
	deleteTenant(ctx, t, e, etcd, t1)
	if f := e.sim.Failures(); len(f) > 0 {
		t.Errorf("VM boot failures: %v", f)
	}
}

// createdTenant is a tenant createTenant made and checked.
type createdTenant struct {
	opts   cluster.Options
	errb   fmt.Stringer
	wcs    kubernetes.Interface
	port   int
	cpName string // the KamajiControlPlane, and the TenantControlPlane Kamaji names after it
	store  string // the TenantControlPlane's DataStore
	schema string // its prefix there
}

// createTenant runs labctl cluster create for the lab's tenant name and
// checks the tenant (checkTenant): its Cilium came from its
// ClusterResourceSet, so no Helm release of it is there.
func createTenant(ctx context.Context, t *testing.T, e *bootEnv, name, platform string) createdTenant {
	t.Helper()
	io, _, _, errb := ui.Test()
	dir := t.TempDir()
	opts := cluster.Options{IO: io, Lab: e.lab, Name: name, Mgmt: e.kc, KubeconfigDir: dir, Timeout: 6 * time.Minute}
	start := time.Now()
	createCluster(ctx, t, e, opts, errb)
	t.Logf("labctl cluster create %s: %.0fs", name, time.Since(start).Seconds())
	ct := checkTenant(ctx, t, e, opts, platform, filepath.Join(dir, name+".kubeconfig"))
	ct.errb = errb
	if rel, err := ct.wcs.CoreV1().Secrets(clusterapi.CiliumNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"}); err != nil || len(rel.Items) != 0 {
		t.Errorf("Helm releases in %s: %v, %v; want none (Cilium comes from the ClusterResourceSet)", name, rel, err)
	}
	return ct
}

// checkTenant checks what a user of tenant opts.Name would see: the
// kubeconfig at path names the management VM's address and the tenant's
// port and reaches the tenant there, with kubeadm's state, labctl's
// CoreDNS below the autoscaler's cutoff (Kamaji's addon, at
// system-cluster-critical, would keep the last worker) and Cilium aimed
// at the tenant's endpoint inside; and one
// Cluster of labctl's class for the platform, made by the topology
// controller, whose TenantControlPlane it reads.
func checkTenant(ctx context.Context, t *testing.T, e *bootEnv, opts cluster.Options, platform, path string) createdTenant {
	t.Helper()
	name := opts.Name
	c, err := e.lab.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	ct := createdTenant{opts: opts, port: c.ControlPlane.Port}
	wcfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://" + net.JoinHostPort(e.lab.Management.IP, strconv.Itoa(ct.port)); wcfg.Host != want {
		t.Errorf("%s's kubeconfig names %s, want the management VM's address and the tenant's port, %s", name, wcfg.Host, want)
	}
	wcs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	ct.wcs = wcs
	tenantHasKubeadmState(ctx, t, wcs, c.KubernetesVersion)
	var pc string
	waitUntil(ctx, t, 2*time.Minute, name+"'s CoreDNS from its ClusterResourceSet", func() {}, func() (bool, string) {
		dns, err := wcs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pc = dns.Spec.Template.Spec.PriorityClassName
		return true, ""
	})
	if pc != clusterapi.TenantAddonPriorityClass {
		t.Errorf("%s's CoreDNS runs at PriorityClass %q, want %s", name, pc, clusterapi.TenantAddonPriorityClass)
	}
	// Cilium's agents reach the tenant's API server at its endpoint,
	// not through the kubernetes Service they have yet to make work (the
	// chart's KUBERNETES_SERVICE_HOST and _PORT).
	var ds *appsv1.DaemonSet
	waitUntil(ctx, t, time.Minute, name+"'s Cilium agent DaemonSet", func() {}, func() (bool, string) {
		ds, err = wcs.AppsV1().DaemonSets(clusterapi.CiliumNamespace).Get(ctx, "cilium", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	env := map[string]string{}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, v := range c.Env {
			env[c.Name+" "+v.Name] = v.Value
		}
	}
	if h, p := env["cilium-agent KUBERNETES_SERVICE_HOST"], env["cilium-agent KUBERNETES_SERVICE_PORT"]; h != e.lab.Management.IP || p != strconv.Itoa(ct.port) {
		t.Errorf("%s's Cilium agent reaches the API server at %s:%s, want %s:%d", name, h, p, e.lab.Management.IP, ct.port)
	}
	cl := get(ctx, t, e.cl, "cluster.x-k8s.io", "Cluster", clusterapi.Namespace(name), name)
	if class, _, _ := unstructured.NestedString(cl.Object, "spec", "topology", "classRef", "name"); class != clusterapi.TenantClass(platform) {
		t.Errorf("%s's Cluster has class %q, want %s", name, class, clusterapi.TenantClass(platform))
	}
	ct.cpName, _, _ = unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "name")
	tcp := &unstructured.Unstructured{}
	tcp.SetGroupVersionKind(clusterapi.TenantControlPlaneGVK)
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: clusterapi.Namespace(name), Name: ct.cpName}, tcp); err != nil {
		t.Fatalf("%s's TenantControlPlane: %v", name, err)
	}
	ct.store, _, _ = unstructured.NestedString(tcp.Object, "status", "storage", "dataStoreName")
	ct.schema, _, _ = unstructured.NestedString(tcp.Object, "status", "storage", "setup", "schema")
	return ct
}

// kubectlTenant makes tenant3, a copy of tenant1 on a port and addresses
// of its own, as a self-service user does: 'labctl cluster create
// tenant3 --dry-run -o yaml' prints the manifest, and the test bed's
// kubectl applies it to the management cluster, with nothing of labctl
// after. The tenant comes up with its control plane, kubeadm's state,
// CoreDNS, Cilium and its autoscaler, all from that manifest.
func kubectlTenant(ctx context.Context, t *testing.T, e *bootEnv) createdTenant {
	t.Helper()
	const name = "tenant3"
	src, err := e.lab.Cluster("tenant1")
	if err != nil {
		t.Fatal(err)
	}
	c := *src
	c.Name, c.NodeIPRange = name, "127.77.0.80-127.77.0.89"
	c.ControlPlane.Port = tenantPort(t)
	for _, o := range e.lab.Clusters {
		for c.ControlPlane.Port == o.ControlPlane.Port {
			c.ControlPlane.Port = tenantPort(t)
		}
	}
	e.lab.Clusters = append(e.lab.Clusters, c)
	if errs := config.Validate(e.lab); len(errs) > 0 {
		t.Fatalf("the lab with %s does not validate: %v", name, errs)
	}
	labFile := writeLab(t, e.lab)
	io, _, out, errb := ui.Test()
	if code := cmd.Run(ctx, cmdutil.New(io, &cmdutil.Settings{}), []string{"-c", labFile, "cluster", "create", name, "--dry-run", "-o", "yaml"}); code != 0 {
		t.Fatalf("labctl cluster create %s --dry-run -o yaml: exit %d\n%s", name, code, errb)
	}
	manifest := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(manifest, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubectl := exec.CommandContext(ctx, filepath.Join(testbed.Assets(t), "kubectl"), "--kubeconfig", e.box.Env.Kubeconfig, "apply", "-f", manifest)
	if b, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", manifest, err, b)
	} else {
		t.Logf("kubectl apply -f %s:\n%s", manifest, b)
	}
	// What kubectl alone gives: Cluster API's kubeconfig, once Kamaji's
	// provider has written it.
	var kc []byte
	waitUntil(ctx, t, 6*time.Minute, name+"'s kubeconfig Secret", func() {}, func() (bool, string) {
		kc, err = cluster.Kubeconfig(ctx, cluster.Options{Mgmt: e.kc, Name: name})
		return err == nil, fmt.Sprint(err)
	})
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	// Kamaji binds the admin once its kubeadm phases have run in the
	// tenant; until then a user's kubectl is Forbidden, as 'cluster
	// create' waits out.
	admin := clientOf(t, kc)
	waitUntil(ctx, t, 2*time.Minute, name+"'s admin rights", func() {}, func() (bool, string) {
		_, err := admin.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	io, _, _, errb = ui.Test()
	ct := checkTenant(ctx, t, e, cluster.Options{IO: io, Lab: e.lab, Name: name, Mgmt: e.kc, KubeconfigDir: t.TempDir(), Timeout: 6 * time.Minute}, config.PlatformProxmox, path)
	ct.errb = errb
	t.Logf("kubectl apply of %s until CoreDNS and Cilium: %.0fs", name, time.Since(start).Seconds())
	// Its autoscaler, from the same manifest, runs against it.
	autoscalerRunsAsRendered(ctx, t, e, name, ct.wcs)
	return ct
}

// deleteTenant runs labctl cluster delete for a tenant: nothing of it is
// left, in the management cluster, on the fake PVE or in the datastore
// under its prefix, and the runner no longer runs its control plane.
func deleteTenant(ctx context.Context, t *testing.T, e *bootEnv, etcd *box.Etcd, ct createdTenant) {
	t.Helper()
	name := ct.opts.Name
	prefix := "/" + ct.schema + "/"
	if n, err := etcd.Count(ctx, prefix); ct.schema == "" || err != nil || n == 0 {
		t.Fatalf("datastore keys under %q before deleting %s: %d, %v; want the tenant's", prefix, name, n, err)
	}
	if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: ct.opts, Yes: true}); err != nil {
		t.Fatalf("labctl cluster delete %s --yes: %v\n%s", name, err, ct.errb)
	}
	nothingLeft(ctx, t, e, e.lab, name)
	waitUntil(ctx, t, 3*time.Minute, "no TenantControlPlane and no key under "+prefix, func() {}, func() (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(clusterapi.TenantControlPlaneGVK)
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: clusterapi.Namespace(name), Name: ct.cpName}, u); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("TenantControlPlane: %v", err)
		}
		n, err := etcd.Count(ctx, prefix)
		return err == nil && n == 0, fmt.Sprintf("%d keys (%v)", n, err)
	})
	if p := e.box.Runner.Proc(clusterapi.Namespace(name), ct.cpName); p != nil {
		t.Errorf("the runner still runs the deleted tenant %s's control plane %s", name, p.Pod)
	}
}

// tenantBox is the box of the test lab with examples/lab-tenants.yaml's
// tenant1 on a free port (labShape.tenantPort), and what 'mgmt install'
// adds for tenants: Kamaji, its provider and datastore (returned),
// labctl's tenant ClusterClasses; for every cluster the autoscaler's
// shared ClusterRole; and the ServiceLB stand-in at the management VM's
// address. Cilium is the real chart labctl carries.
func tenantBox(ctx context.Context, t testing.TB, kvm bool) (*bootEnv, *box.Etcd) {
	t.Helper()
	box.Require(t, "cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "ipam-in-cluster", "capmox", "kwok",
		"kamaji", "kamaji-provider", "kube-controller-manager", "kube-scheduler", "cluster-autoscaler")
	box.KamajiSource(t)
	shape := labShape{tenantPort: tenantPort(t)}
	setup := kamajiSetup{releases: []string{"kamaji-provider"}, dataStore: components.KamajiDataStore}
	if kvm {
		for shape.kvmTenantPort == 0 || shape.kvmTenantPort == shape.tenantPort {
			shape.kvmTenantPort = tenantPort(t)
		}
		// What 'mgmt install' gives the provider in a lab with a KVM
		// tenant (components: its variables and RBAC).
		setup.vars = components.KamajiLibvirtVariables
		for i := range shape.kvmHosts {
			shape.kvmHosts[i] = libvirttest.StartPrivate(t)
		}
	}
	e := bootBox(t, shape)
	lab := e.lab
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{sshKey}
	etcd := kamajiStack(ctx, t, e.box, e.kc, setup)
	if kvm {
		if _, err := e.kc.Apply(ctx, components.KamajiLibvirtRBAC(), kube.ApplyOptions{}); err != nil {
			t.Fatalf("applying the Kamaji provider's LibvirtCluster RBAC: %v", err)
		}
		// Each host holds tenant2's node image, as 'labctl image build
		// ubuntu-kvm' leaves it.
		img, err := lab.Image("ubuntu-kvm")
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range shape.kvmHosts {
			nodeimage.Place(t, d, fmt.Sprintf("kvm%d", i+1), kvmStoragePool, img.VolumeName())
		}
		startLibvirtProvider(ctx, t, e, testHost(&libvirttest.Cutter{}))
	}
	e.box.Runner.ServeLoadBalancers(lab.Management.IP)
	applyStackPart(ctx, t, e, "tenant ClusterClasses", nil)
	applySharedRole(ctx, t, e)
	return e, etcd
}

// tenantPort is a free loopback port a tenant may have: lab.yaml refuses
// the management cluster's NodePort range, which the machine's ephemeral
// ports may overlap.
func tenantPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		if p := freePort(t); p < 30000 || p > 32767 {
			return p
		}
	}
	t.Fatal("no free port outside the NodePort range 30000-32767")
	return 0
}

// applyStackPart applies the objects of labctl's rendered management
// stack (components.Build) that keep accepts (all when nil), of the
// component named component (of every one when ""), and returns them.
func applyStackPart(ctx context.Context, t testing.TB, e *bootEnv, component string, keep func(*unstructured.Unstructured) bool) []*unstructured.Unstructured {
	t.Helper()
	cs, err := components.Build(e.lab, versions.MustGet(), components.Options{ReadSecret: (*config.Hypervisor).ReadTokenSecret})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, c := range cs {
		if component != "" && c.Name != component {
			continue
		}
		for _, o := range c.Objects {
			if keep == nil || keep(o) {
				objs = append(objs, o)
			}
		}
	}
	if len(objs) == 0 {
		t.Fatalf("labctl's management stack renders nothing of %q to apply", component)
	}
	if _, err := e.kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying labctl's %s: %v", component, err)
	}
	return objs
}

// BenchmarkTenantCreate runs labctl cluster create for a tenant and for a
// kubeadm cluster side by side on one box (examples/lab-tenants.yaml's
// tenant1 and lab1, both on the fake PVE), and reports each in seconds,
// until create returns: for the tenant its API server serving its admin
// (and Cilium and the autoscaler applied), for lab1 its control-plane VM
// cloned, booted by the sim and initialized (and the same after). It
// also reports the resident memory of the tenant's control plane (its
// three processes, as the runner runs them from Kamaji's Deployment) and
// of Kamaji and its provider, in MiB. docs/tenants.md records the
// figures; run with -run '^$' -bench BenchmarkTenantCreate -benchtime=1x.
func BenchmarkTenantCreate(b *testing.B) {
	for b.Loop() {
		ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
		e, _ := tenantBox(ctx, b, false)
		lab := e.lab

		took := map[string]float64{}
		for _, name := range []string{"tenant1", "lab1"} {
			io, _, _, errb := ui.Test()
			start := time.Now()
			createCluster(ctx, b, e, cluster.Options{IO: io, Lab: lab, Name: name, Mgmt: e.kc, KubeconfigDir: b.TempDir(), Timeout: 6 * time.Minute}, errb)
			took[name] = time.Since(start).Seconds()
		}
		b.ReportMetric(took["tenant1"], "s-create/tenant")
		b.ReportMetric(took["lab1"], "s-create/kubeadm")

		cl := get(ctx, b, e.cl, "cluster.x-k8s.io", "Cluster", clusterapi.Namespace("tenant1"), "tenant1")
		cpName, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "name")
		tcp := e.box.Runner.Proc(clusterapi.Namespace("tenant1"), cpName)
		if tcp == nil {
			b.Fatalf("the runner runs no control plane for tenant1 (%s)", cpName)
		}
		sum := func(procs ...*runner.Proc) float64 {
			total := 0
			for _, p := range procs {
				kib, err := rssKiB(p.Pid())
				if err != nil {
					b.Fatal(err)
				}
				total += kib
			}
			return float64(total) / 1024
		}
		b.ReportMetric(sum(tcp.Pod...), "MiB-RSS/tenant-control-plane")
		b.ReportMetric(sum(e.box.Runner.Proc(components.KamajiNamespace, components.KamajiRelease),
			e.box.Runner.Proc(components.KamajiNamespace, "capi-kamaji-controller-manager")), "MiB-RSS/kamaji+provider")
		cancel()
	}
}
