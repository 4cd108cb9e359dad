package box_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/scaletest"
	"github.com/labctl/labctl/internal/testing/bootsim"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// oldTemplateID is the node template of the release before the pin, which
// 'image build' of a labctl pinning it left beside the new one.
const oldTemplateID = templateID + 1

// labctl cluster upgrade lab1 on the box, with the real Cluster API,
// kubeadm and CAPMOX: lab1 is made at the release before the pin, with
// its control plane the test bed's real binaries of that release (the
// VM-boot sim starts what the bootstrap data asks for) and two workers
// holding a workload. The upgrade to the pin goes through KCP's own roll
// (a second control-plane machine joins the etcd cluster, the first is
// removed) and the MachineDeployment's (maxSurge 0). Midway, once the
// control plane runs the target, the target's template is taken away: the
// run stops, naming the worker Machine that cannot be made and why, and a
// re-run once the template is back finishes. Then rolledAndChecked.
//
// Not in make test yet, for the same reason as TestTenantUpgradeOnTheBox:
// in one of five runs a worker made after the roll could not join, its
// bootstrap token never signed into cluster-info by the upgraded
// controller-manager. LABCTL_TENANT_UPGRADE=1 runs both.
func TestLab1UpgradeOnTheBox(t *testing.T) {
	if os.Getenv("LABCTL_TENANT_UPGRADE") == "" {
		t.Skip("set LABCTL_TENANT_UPGRADE=1: a worker's join after the roll failed in one of five runs (docs/upgrades.md)")
	}
	lab1Upgrade(t, true)
}

// BenchmarkLab1Upgrade is the upgrade of lab1 (1 control plane, 2
// workers) on the box, v1.35.3 to v1.35.4, with the time of each machine:
// run with 'go test -tags provider -run '^$' -bench Lab1Upgrade
// -benchtime 1x ./internal/testing/testbed/box/'.
func BenchmarkLab1Upgrade(b *testing.B) {
	for b.Loop() {
		rep := lab1Upgrade(b, false)
		b.ReportMetric(rep.took.Seconds(), "s-upgrade")
		for _, m := range rep.Machines {
			if m.Running == 0 {
				continue // an old machine: its Gone is the next one's start
			}
			what := "cp"
			if strings.HasPrefix(m.Stage, "pool") {
				what = "worker"
			}
			b.ReportMetric(m.Running.Seconds(), "s-"+what+"-running/"+m.Name[strings.LastIndex(m.Name, "-")+1:])
		}
	}
}

// lab1Upgrade is TestLab1UpgradeOnTheBox's run; failMidRoll takes the
// template away midway.
func lab1Upgrade(t testing.TB, failMidRoll bool) *rolled {
	e := bootBox(t, labShape{})
	lab := e.lab
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{sshKey}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	applySharedRole(ctx, t, e)
	old := labAtPrevious(t, e, "lab1")
	io, _, _, errb := ui.Test()
	opts := cluster.Options{IO: io, Lab: old, Name: "lab1", Mgmt: e.kc, KubeconfigDir: t.TempDir(), Timeout: 6 * time.Minute}
	createCluster(ctx, t, e, opts, errb)
	wcs := workloadClient(ctx, t, e)
	return rolledAndChecked(ctx, t, e, opts, wcs, 2, 1, failMidRoll)
}

// labctl cluster upgrade tenant1 on the box: a Kamaji tenant made at the
// release before the pin (Kamaji runs the test bed's kube-apiserver of
// that release for it), one worker holding a workload. The upgrade sets
// the Cluster's topology version; the real topology controller, Kamaji
// provider and Kamaji move the control plane, then the pool. Then
// rolledAndChecked, with no control-plane VM anywhere.
//
// Not in make test yet: in one of its two runs (CI, 2026-12-07) the new
// worker of the rolled pool could not join, as the tenant's upgraded
// kube-controller-manager (leader from the start of the roll) never
// signed cluster-info for its bootstrap token within kubeadm's 5 minute
// discovery. The latest run points at the test bed: the sim's discovery
// read a stale cluster-info on a reused connection while the cluster's
// own was signed. Until that is fixed, set LABCTL_TENANT_UPGRADE=1 to run
// it (docs/upgrades.md).
func TestTenantUpgradeOnTheBox(t *testing.T) {
	if os.Getenv("LABCTL_TENANT_UPGRADE") == "" {
		t.Skip("set LABCTL_TENANT_UPGRADE=1: the tenant's worker join after the roll failed in one of two runs (docs/upgrades.md)")
	}
	const name = "tenant1"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	e, _ := tenantBox(ctx, t, false)
	lab := e.lab
	e.lab = labAtPrevious(t, e, name)
	ct := createTenant(ctx, t, e, name, config.PlatformProxmox)
	e.lab = lab
	opts := ct.opts
	opts.Lab = lab
	rolledAndChecked(ctx, t, e, opts, ct.wcs, 1, 0, false)
}

// labAtPrevious is e's lab with cluster name and its image at the release
// before the pin, and that image's template beside the pin's in the fake
// PVE, as 'image build' of a labctl pinning it left it.
func labAtPrevious(t testing.TB, e *bootEnv, name string) *config.Lab {
	t.Helper()
	old, err := cluster.AtVersion(e.lab, name, testbed.PreviousKubernetes)
	if err != nil {
		t.Fatal(err)
	}
	c, err := old.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	img, err := old.Image(c.PoolTemplate(c.Pools[0]).Image)
	if err != nil {
		t.Fatal(err)
	}
	e.fake.AddTemplate("pv1-1", oldTemplateID, img.Name, img.TemplateTags()...)
	return old
}

// rolledAndChecked is the rest of both upgrade tests: cluster opts.Name,
// made at the release before the pin, gets a workload of one pod per
// worker, which the autoscaler raises the pool from zero for (workers
// VMs, plus cpVMs of the control plane). 'labctl cluster upgrade' to the
// pin must then leave every VM of the cluster a clone of the new template
// with the old ones gone, the API server and every kubelet at the pin
// (by their own word), describe with no old version, the workload
// running, and the autoscaler scaling the pool down to zero and up from
// it again, on the new template. With failMidRoll, the new template is
// taken away once the control plane runs the target (stopUpgradeMidRoll).
func rolledAndChecked(ctx context.Context, t testing.TB, e *bootEnv, opts cluster.Options, wcs kubernetes.Interface, workers, cpVMs int, failMidRoll bool) *rolled {
	t.Helper()
	name, lab := opts.Name, opts.Lab
	prev, pin := testbed.PreviousKubernetes, versions.MustGet().Kubernetes
	as := autoscalerRunsAsRendered(ctx, t, e, name, wcs)
	serverVersionIs(t, wcs, prev)

	web := webDeployment(int32(workers))
	if _, err := wcs.AppsV1().Deployments("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webRuns(ctx, t, e, wcs, workers)
	kubeletsAre(ctx, t, wcs, workers+cpVMs, prev)
	before := vmsOf(e, name)
	if len(before) != workers+cpVMs {
		t.Fatalf("%s's VMs before the upgrade: %v, want %d", name, before, workers+cpVMs)
	}
	for vm, tags := range before {
		if !slices.Contains(tags, "kubernetes-"+prev) {
			t.Errorf("VM %s's tags %v: not a clone of the %s template", vm, tags, prev)
		}
	}
	clonesBefore := clonesOf(e, oldTemplateID) + clonesOf(e, templateID)

	var output string // the last run's
	upgrade := func(timeout time.Duration) (*cluster.UpgradeReport, error) {
		uio, _, _, uerr := ui.Test()
		defer func() { output = uerr.String() }()
		driver := func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }
		began := time.Now()
		rep, err := cluster.Upgrade(ctx, cluster.UpgradeOptions{Options: cluster.Options{IO: uio, Lab: lab, Name: name, Mgmt: e.kc,
			Timeout: timeout}, Driver: driver, Yes: true})
		t.Logf("cluster upgrade %s took %s; its output:\n%s", name, time.Since(began).Round(time.Second), uerr)
		return rep, err
	}
	from := prev
	if failMidRoll {
		stopUpgradeMidRoll(ctx, t, e, name, upgrade)
		from = pin // the control plane was upgraded by the first run
		defer func() {
			// CAPMOX never retries the machine it gave up on: the re-run
			// replaced it.
			if !strings.Contains(output, "replacing Machine lab1/"+name+"-workers-") || !strings.Contains(output, "CAPMOX gave up") {
				t.Errorf("the re-run did not say it replaced the machine CAPMOX gave up on:\n%s", output)
			}
		}()
	}
	began := time.Now()
	rep, err := upgrade(15 * time.Minute)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("labctl cluster upgrade %s: %v\nautoscaler log:\n%s\nVM boot failures: %v", name, err, runner.Tail(as.Log, 60), e.sim.Failures())
	}
	if rep.From != from || rep.To != pin {
		t.Errorf("the report says %s → %s, want %s → %s", rep.From, rep.To, from, pin)
	}
	for _, m := range rep.Machines {
		t.Logf("%s: %s %s created +%s running +%s gone +%s", m.Stage, m.Name, m.Version, m.Created, m.Running, m.Gone)
	}

	// Every VM is new, a clone of the new template; the old ones are gone.
	after := vmsOf(e, name)
	if len(after) != workers+cpVMs {
		t.Errorf("%s's VMs after the upgrade: %v, want %d", name, after, workers+cpVMs)
	}
	for vm, tags := range after {
		if _, was := before[vm]; was {
			t.Errorf("VM %s of before the upgrade is still there", vm)
		}
		if !slices.Contains(tags, "kubernetes-"+pin) {
			t.Errorf("VM %s's tags %v: not a clone of the %s template", vm, tags, pin)
		}
	}
	if n := clonesOf(e, oldTemplateID) + clonesOf(e, templateID) - clonesBefore; n != len(after) {
		t.Errorf("%d clones during the upgrade, want %d", n, len(after))
	}
	if !slices.ContainsFunc(e.fake.VMs(), func(v pvetest.VM) bool { return v.ID == oldTemplateID }) {
		t.Error("the old template is gone: labctl must delete nothing the old version needs")
	}

	serverVersionIs(t, wcs, pin)
	kubeletsAre(ctx, t, wcs, workers+cpVMs, pin)
	webRuns(ctx, t, e, wcs, workers)
	describeShowsOnly(ctx, t, opts, pin, prev, workers+cpVMs)

	// The autoscaler keeps its pool: down to zero once the workload goes,
	// and from zero again, on the new template.
	if err := wcs.AppsV1().Deployments("default").Delete(ctx, web.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lab.ScaleTest.Timeouts.ScaleDown, lab.ScaleTest.Timeouts.FromZero = "6m", "5m"
	scaleTestPassed(t, scaleTest(ctx, t, e, lab, name, "down", as), scaletest.PhaseDown)
	// scale-test refuses to start while its last run's namespace is
	// still being deleted.
	waitUntil(ctx, t, 2*time.Minute, "scale-test's namespace gone", e.alive(t), func() (bool, string) {
		_, err := wcs.CoreV1().Namespaces().Get(ctx, scaletest.Namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	scaleTestPassed(t, scaleTest(ctx, t, e, lab, name, "from-zero", as), scaletest.PhaseFromZero)
	for vm, tags := range vmsOf(e, name) {
		if !slices.Contains(tags, "kubernetes-"+pin) {
			t.Errorf("VM %s from zero has tags %v: not a clone of the %s template", vm, tags, pin)
		}
	}
	kubeletsAre(ctx, t, wcs, -1, pin)
	return &rolled{UpgradeReport: rep, took: took}
}

// rolled is the report of an upgrade and how long it took.
type rolled struct {
	*cluster.UpgradeReport
	took time.Duration
}

// stopUpgradeMidRoll runs the upgrade with a short timeout and, once the
// control plane runs the target, deletes the target's template through
// the Proxmox API, as a user cleaning templates might: the run must stop
// naming the pool's new Machine and CAPMOX's reason. The template is then
// made again, as 'image build' would. CAPMOX gives up on a machine whose
// template is gone for good, so the run stops at once rather than at its
// timeout.
func stopUpgradeMidRoll(ctx context.Context, t testing.TB, e *bootEnv, name string, upgrade func(time.Duration) (*cluster.UpgradeReport, error)) {
	t.Helper()
	pin := versions.MustGet().Kubernetes
	tmpl := slices.IndexFunc(e.fake.VMs(), func(v pvetest.VM) bool { return v.ID == templateID })
	if tmpl < 0 {
		t.Fatal("no template of the pin in the fake PVE")
	}
	template := e.fake.VMs()[tmpl]
	type result struct {
		rep *cluster.UpgradeReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := upgrade(5 * time.Minute)
		done <- result{rep, err}
	}()
	waitUntil(ctx, t, 6*time.Minute, "the control plane of "+name+" at "+pin, e.alive(t), func() (bool, string) {
		ms := &unstructured.UnstructuredList{}
		ms.SetGroupVersionKind(clusterapi.MachineGVK.GroupVersion().WithKind("MachineList"))
		if err := e.cl.List(ctx, ms, client.InNamespace(clusterapi.Namespace(name)), client.HasLabels{"cluster.x-k8s.io/control-plane"}); err != nil {
			return false, err.Error()
		}
		var states []string
		for _, m := range ms.Items {
			v, _, _ := unstructured.NestedString(m.Object, "spec", "version")
			phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
			states = append(states, m.GetName()+" "+v+" "+phase)
			if v != pin || phase != "Running" {
				return false, strings.Join(states, ", ")
			}
		}
		return len(ms.Items) == 1, strings.Join(states, ", ")
	})
	c := pve.NewClient(e.fake.URL+"/api2/json", pve.WithHTTPClient(e.fake.Client()), pve.WithAPIToken(e.fake.TokenID, e.fake.Secret))
	node, err := c.Node(ctx, template.Node)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := node.VirtualMachine(ctx, templateID)
	if err != nil {
		t.Fatal(err)
	}
	task, err := vm.Delete(ctx, nil)
	if err != nil {
		t.Fatalf("deleting the template %d: %v", templateID, err)
	}
	if err := task.WaitFor(ctx, 30); err != nil {
		t.Fatalf("deleting the template %d: %v", templateID, err)
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if r.err == nil {
		t.Fatal("cluster upgrade finished with the target's template gone")
	}
	msg := r.err.Error()
	for _, want := range []string{"Machine " + clusterapi.Namespace(name) + "/" + name + "-workers-", "cannot run " + pin, "CAPMOX gave up", "VM template not found", "cluster upgrade " + name + "' again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the stopped run's error lacks %q:\n%s", want, msg)
		}
	}
	t.Logf("the run stopped: %v", r.err)
	e.fake.AddTemplate(template.Node, templateID, template.Name(), template.Tags()...)
}

// webDeployment is a workload whose pods take most of a lab1 worker's
// memory (2Gi, about 1.78 GiB allocatable), so each needs a worker.
func webDeployment(n int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{clusterapi.LabelPool: "workers"},
					Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
				},
			},
		},
	}
}

// webRuns waits until the web Deployment's n pods run, each on its own
// worker.
func webRuns(ctx context.Context, t testing.TB, e *bootEnv, wcs kubernetes.Interface, n int) {
	t.Helper()
	waitUntil(ctx, t, 6*time.Minute, fmt.Sprintf("%d web pods Running", n), e.alive(t), func() (bool, string) {
		pods, err := wcs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		running, nodes := 0, map[string]bool{}
		var states []string
		for _, p := range pods.Items {
			states = append(states, fmt.Sprintf("%s %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName))
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
				nodes[p.Spec.NodeName] = true
			}
		}
		return running == n && len(nodes) == n, strings.Join(states, "; ")
	})
}

// kubeletsAre checks every Node's kubelet version (and, n >= 0, their
// number): what the kubelet of each VM's image reports.
func kubeletsAre(ctx context.Context, t testing.TB, wcs kubernetes.Interface, n int, v string) {
	t.Helper()
	nodes, err := wcs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n >= 0 && len(nodes.Items) != n {
		t.Errorf("%d Nodes, want %d", len(nodes.Items), n)
	}
	for _, node := range nodes.Items {
		if got := node.Status.NodeInfo.KubeletVersion; got != v {
			t.Errorf("Node %s's kubelet is %q, want %s", node.Name, got, v)
		}
		if _, cp := node.Labels[bootsim.LabelControlPlane]; !cp && node.Labels[clusterapi.LabelPool] == "" {
			t.Errorf("Node %s is neither control plane nor in a pool: %v", node.Name, node.Labels)
		}
	}
}

// serverVersionIs asks the workload API server for its version: the
// binary's own word, which the test bed stamps as Kubernetes' build does.
func serverVersionIs(t testing.TB, wcs kubernetes.Interface, v string) {
	t.Helper()
	got, err := wcs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("the workload API server's version: %v", err)
	}
	if got.GitVersion != v {
		t.Errorf("the workload API server runs %s, want %s", got.GitVersion, v)
	}
}

// vmsOf are cluster name's VMs in the fake PVE, by name (a VMID is used
// again once its VM is gone), with their tags.
func vmsOf(e *bootEnv, name string) map[string][]string {
	out := map[string][]string{}
	for _, v := range e.fake.VMs() {
		if strings.HasPrefix(v.Name(), name+"-") {
			out[v.Name()] = v.Tags()
		}
	}
	return out
}

// clonesOf counts the clones of template id the fake PVE made.
func clonesOf(e *bootEnv, id int) int {
	n := 0
	for _, r := range e.fake.Requests() {
		if r.Method == "POST" && r.Path == "/nodes/{node}/qemu/{vmid}/clone" && r.Status < 300 &&
			strings.Contains(r.Raw, fmt.Sprintf("/qemu/%d/clone", id)) {
			n++
		}
	}
	return n
}

// describeShowsOnly checks 'cluster describe' after the roll: the control
// plane and every one of the machines Machines at want, nothing at old.
func describeShowsOnly(ctx context.Context, t testing.TB, opts cluster.Options, want, old string, machines int) {
	t.Helper()
	d, err := cluster.Describe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	io, _, out, _ := ui.Test()
	if err := cluster.DescribeText(io, out, d); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("cluster describe %s:\n%s", opts.Name, text)
	if strings.Contains(text, old) {
		t.Errorf("describe still shows %s", old)
	}
	seen := 0
	var walk func(n *cluster.Node)
	walk = func(n *cluster.Node) {
		if n.Kind == "Machine" && n.Role == "" {
			seen++
		}
		if (n.Kind == "Machine" && n.Role == "") || n.Role == "ControlPlane" {
			if !strings.Contains(n.Details, want) {
				t.Errorf("describe's %s %s: %q, want it at %s", n.Kind, n.Name, n.Details, want)
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(d.Tree)
	if seen != machines {
		t.Errorf("describe shows %d Machines, want %d", seen, machines)
	}
}
