package box_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
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
// worker, and delete leaves no TenantControlPlane, no key under the
// tenant's prefix in the datastore, no VM and no IPAddress.
func TestTenantClusterCreateOnProxmox(t *testing.T) {
	const name = "tenant1"
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	e, etcd := tenantBox(ctx, t)
	lab := e.lab
	tenant, err := lab.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	port := tenant.ControlPlane.Port
	if !tenant.Kamaji() || tenant.Pools[0].Min != 0 || !tenant.Pools[0].Autoscaled() {
		t.Fatalf("the test lab's %s must be a Kamaji tenant whose pool starts at zero, autoscaled", name)
	}
	io, _, _, errb := ui.Test()
	dir := t.TempDir()
	opts := cluster.Options{IO: io, Lab: lab, Name: name, Mgmt: e.kc, KubeconfigDir: dir, Timeout: 6 * time.Minute}
	start := time.Now()
	createCluster(ctx, t, e, opts, errb)
	t.Logf("labctl cluster create %s: %.0fs", name, time.Since(start).Seconds())

	// The kubeconfig create wrote names the tenant's endpoint, and
	// reaches the tenant there: kubeadm's state is inside.
	wcfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, name+".kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://" + net.JoinHostPort(lab.Management.IP, strconv.Itoa(port)); wcfg.Host != want {
		t.Errorf("the tenant's kubeconfig names %s, want the management VM's address and the tenant's port, %s", wcfg.Host, want)
	}
	wcs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	tenantHasKubeadmState(ctx, t, wcs)
	if rel, err := wcs.CoreV1().Secrets(clusterapi.CiliumNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + clusterapi.CiliumRelease + ",status=deployed"}); err != nil || len(rel.Items) != 1 {
		t.Errorf("Cilium's Helm release in the tenant: %v, %v", rel, err)
	}
	// One Cluster of labctl's class, made by the topology controller.
	cl := get(ctx, t, e.cl, "cluster.x-k8s.io", "Cluster", clusterapi.Namespace(name), name)
	if class, _, _ := unstructured.NestedString(cl.Object, "spec", "topology", "classRef", "name"); class != clusterapi.TenantClass(config.PlatformProxmox) {
		t.Errorf("the tenant's Cluster has class %q, want %s", class, clusterapi.TenantClass(config.PlatformProxmox))
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
	// CoreDNS is labctl's, below the autoscaler's cutoff (Kamaji's addon,
	// at system-cluster-critical, would keep the last worker), and
	// Pending: it raised no pool.
	dns, err := wcs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the tenant's CoreDNS: %v", err)
	}
	if pc := dns.Spec.Template.Spec.PriorityClassName; pc != clusterapi.TenantAddonPriorityClass {
		t.Errorf("the tenant's CoreDNS runs at PriorityClass %q, want %s", pc, clusterapi.TenantAddonPriorityClass)
	}
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

	// Delete: nothing of the tenant is left, in the management cluster,
	// on the fake PVE or in the datastore.
	// Kamaji names the TenantControlPlane, and its Deployment, after the
	// KamajiControlPlane the topology made.
	cpName, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "name")
	tcp := &unstructured.Unstructured{}
	tcp.SetGroupVersionKind(clusterapi.TenantControlPlaneGVK)
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: clusterapi.Namespace(name), Name: cpName}, tcp); err != nil {
		t.Fatalf("the tenant's TenantControlPlane: %v", err)
	}
	schemaName, _, _ := unstructured.NestedString(tcp.Object, "status", "storage", "setup", "schema")
	prefix := "/" + schemaName + "/"
	if n, err := etcd.Count(ctx, prefix); schemaName == "" || err != nil || n == 0 {
		t.Fatalf("datastore keys under %q before delete: %d, %v; want the tenant's", prefix, n, err)
	}
	errb.Reset()
	if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: opts, Yes: true}); err != nil {
		t.Fatalf("labctl cluster delete %s --yes: %v\n%s", name, err, errb.String())
	}
	nothingLeft(ctx, t, e, lab, name)
	waitUntil(ctx, t, 3*time.Minute, "no TenantControlPlane and no key under "+prefix, func() {}, func() (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(clusterapi.TenantControlPlaneGVK)
		if err := e.cl.Get(ctx, client.ObjectKey{Namespace: clusterapi.Namespace(name), Name: cpName}, u); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("TenantControlPlane: %v", err)
		}
		n, err := etcd.Count(ctx, prefix)
		return err == nil && n == 0, fmt.Sprintf("%d keys (%v)", n, err)
	})
	if p := e.box.Runner.Proc(clusterapi.Namespace(name), cpName); p != nil {
		t.Errorf("the runner still runs the deleted tenant's control plane %s", p.Pod)
	}
	if f := e.sim.Failures(); len(f) > 0 {
		t.Errorf("VM boot failures: %v", f)
	}
}

// tenantBox is the box of the test lab with examples/lab-tenants.yaml's
// tenant1 on a free port (labShape.tenantPort), and what 'mgmt install'
// adds for tenants: Kamaji, its provider and datastore (returned),
// labctl's tenant ClusterClasses; for every cluster the autoscaler's
// shared ClusterRole; the ServiceLB stand-in at the management VM's
// address; and Cilium's stand-in chart in the offline folder create
// reads it from.
func tenantBox(ctx context.Context, t testing.TB) (*bootEnv, *box.Etcd) {
	t.Helper()
	box.Require(t, "cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "ipam-in-cluster", "capmox", "kwok",
		"kamaji", "kamaji-provider", "kube-controller-manager", "kube-scheduler", "cluster-autoscaler")
	box.KamajiSource(t)
	e := bootBox(t, labShape{tenantPort: tenantPort(t)})
	lab := e.lab
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{sshKey}
	etcd := kamajiStack(ctx, t, e.box, e.kc, kamajiSetup{releases: []string{"kamaji-provider"}, dataStore: components.KamajiDataStore})
	e.box.Runner.ServeLoadBalancers(lab.Management.IP)
	applyStackPart(ctx, t, e, "tenant ClusterClasses", nil)
	applySharedRole(ctx, t, e)
	lab.Management.Stack.OfflineDir = t.TempDir()
	standin.Package(t, lab.Management.Stack.OfflineDir, standin.Cilium, versions.MustGet().Cilium)
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
		e, _ := tenantBox(ctx, b)
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
