package cluster_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// upgradeLab is examples/lab.yaml aimed at the fake PVE srv, with the
// owner's key inline and Cilium's chart from repo.
func upgradeLab(t *testing.T, srv *pvetest.Server, repo string) *config.Lab {
	t.Helper()
	out := testbed.OwnerLab(t, srv.URL, srv.Secret, func(doc, pve map[string]any) {
		pve["tls"] = map[string]any{"fingerprint": proxmox.Fingerprint(srv.Certificate())}
		m := doc["management"].(map[string]any)
		delete(m, "sshPublicKeyFile")
		m["sshPublicKeys"] = []string{ownerKey}
	})
	lab, err := config.Parse("lab.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.Stack.ChartRepos.Cilium = repo
	return lab
}

// machine writes a Machine as Cluster API leaves one: at version, and
// with running its node is up (phase Running, nodeRef, nodeInfo);
// otherwise provisioning, with the InfrastructureReady condition why.
func machine(t *testing.T, c client.Client, name string, labels map[string]string, version string, running bool, why string) {
	t.Helper()
	ctx := context.Background()
	mc := &unstructured.Unstructured{}
	mc.SetGroupVersionKind(clusterapi.MachineGVK)
	mc.SetNamespace("lab1")
	mc.SetName(name)
	mc.SetLabels(labels)
	_ = unstructured.SetNestedMap(mc.Object, map[string]any{
		"clusterName": "lab1", "version": version,
		"bootstrap":         map[string]any{"dataSecretName": name},
		"infrastructureRef": map[string]any{"apiGroup": clusterapi.ProxmoxMachineTemplateGVK.Group, "kind": "ProxmoxMachine", "name": name},
	}, "spec")
	existing := mc.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(mc), existing); err == nil {
		mc = existing
	} else if err := c.Create(ctx, mc); err != nil {
		t.Fatalf("creating Machine %s: %v", name, err)
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	status := map[string]any{"phase": "Provisioning", "conditions": []any{map[string]any{
		"type": "InfrastructureReady", "status": "False", "reason": "NotReady", "message": why, "lastTransitionTime": now}}}
	if running {
		status = map[string]any{"phase": "Running", "nodeRef": map[string]any{"name": name},
			"nodeInfo": map[string]any{"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.8.0", "osImage": "Ubuntu 24.04",
				"containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": version, "kubeProxyVersion": version,
				"operatingSystem": "linux", "architecture": "amd64"}}
	}
	mc.Object["status"] = status
	if err := c.Status().Update(ctx, mc); err != nil {
		t.Fatalf("writing Machine %s's status: %v", name, err)
	}
}

// TestUpgradePreflightPlanFailureAndResume runs 'cluster upgrade' against
// the real API server with the pinned CRDs and the strict fake PVE, with
// lab1 made at v1.35.3. The test plays KubeadmControlPlane's controller
// where the box runs the real one (a new control-plane Machine, then the
// old one deleted).
func TestUpgradePreflightPlanFailureAndResume(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox", "ipam"))
	workload := testbed.Start(t) // the workload cluster, where Cilium runs
	wkc, err := os.ReadFile(workload.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	srv := pvetest.New(t)
	pins := versions.MustGet()
	repo := standin.ServeRepo(t, standin.UpstreamChart(t, t.TempDir(), standin.Cilium))
	lab := upgradeLab(t, srv, repo.URL)
	mc := newClient(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	m, _ := testbed.CountingClient(env)

	// lab1 at v1.35.3, as 'cluster create' of a labctl pinning it left it.
	old, err := cluster.AtVersion(lab, "lab1", "v1.35.3")
	if err != nil {
		t.Fatal(err)
	}
	r, err := cluster.Render(old, "lab1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, append(r.Objects, r.Autoscaler...), kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	oldCPTemplate := refOf(t, r.Find("KubeadmControlPlane", r.ControlPlane), "spec", "machineTemplate", "spec", "infrastructureRef")
	cpLabels := map[string]string{clusterapi.ClusterNameLabel: "lab1", "cluster.x-k8s.io/control-plane-name": r.ControlPlane, "cluster.x-k8s.io/control-plane": ""}
	machine(t, mc, "lab1-control-plane-old", cpLabels, "v1.35.3", true, "")
	if err := mc.Create(ctx, secretOf("lab1", "lab1-kubeconfig", wkc)); err != nil {
		t.Fatal(err)
	}
	c, _ := lab.Cluster("lab1")
	cilium, err := cluster.NewCilium(lab, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := cilium.Install(ctx, wkc, time.Minute); err != nil {
		t.Fatal(err)
	}
	driver := func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }
	run := func(mod func(*cluster.UpgradeOptions)) (string, *cluster.UpgradeReport, int64, error) {
		t.Helper()
		kc, writes := testbed.CountingClient(env)
		io, _, _, errb := ui.Test()
		o := cluster.UpgradeOptions{Options: cluster.Options{IO: io, Lab: lab, Name: "lab1", Mgmt: kc,
			Timeout: time.Minute, Verbose: 1}, Driver: driver, Yes: true}
		if mod != nil {
			mod(&o)
		}
		rep, err := cluster.Upgrade(ctx, o)
		return errb.String(), rep, writes.Load(), err
	}

	// No node image at v1.35.4 yet: refused, with the line to run.
	out, _, writes, err := run(nil)
	if !errors.Is(err, cluster.ErrUpgradeRefused) ||
		!strings.Contains(err.Error(), "the node image ubuntu-2404-kube at Kubernetes v1.35.4 is not on Proxmox hypervisor pve (a template tagged labctl, labctl-image-ubuntu-2404-kube, kubernetes-v1.35.4); build it with: labctl image build ubuntu-2404-kube --kubernetes-version v1.35.4") {
		t.Errorf("without the image: %v\n%s", err, out)
	}
	if writes != 0 {
		t.Errorf("the refused upgrade made %d writes", writes)
	}
	srv.AddVM("pv1-1", 9001, "ubuntu-2404-kube-v1.35.4", 0, false, true, "labctl", "labctl-image-ubuntu-2404-kube", "kubernetes-v1.35.4")

	// Kubernetes does not go down, nor skip a minor.
	srv.AddVM("pv1-1", 9002, "ubuntu-2404-kube-v1.35.2", 0, false, true, "labctl", "labctl-image-ubuntu-2404-kube", "kubernetes-v1.35.2")
	if out, _, _, err := run(func(o *cluster.UpgradeOptions) { o.To = "v1.35.2" }); !errors.Is(err, cluster.ErrUpgradeRefused) ||
		!strings.Contains(err.Error(), "the cluster runs v1.35.3, newer than v1.35.2: Kubernetes does not downgrade") {
		t.Errorf("downgrade: %v\n%s", err, out)
	}
	if _, _, _, err := run(func(o *cluster.UpgradeOptions) { o.To = "v1.36.0" }); err == nil || !strings.Contains(err.Error(), "v1.36.0 is not supported") {
		t.Errorf("above the cap: %v", err)
	}

	// The dry run: the plan, and no write.
	out, rep, writes, err := run(func(o *cluster.UpgradeOptions) { o.DryRun = true })
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if writes != 0 {
		t.Errorf("the dry run made %d writes", writes)
	}
	for _, want := range []string{
		"Upgrade plan for cluster lab1: Kubernetes v1.35.3 → v1.35.4",
		"  1. control plane (KubeadmControlPlane lab1/lab1-control-plane) v1.35.3 → v1.35.4: ",
		"       lab1-control-plane-old v1.35.3",
		"  2. pool workers (MachineDeployment lab1/lab1-workers) v1.35.3 → v1.35.4: sets the version and templates; the pool is at zero, so no VM is made",
		"  3. autoscaler (Deployment lab1/cluster-autoscaler) " + pins.ClusterAutoscaler + " → " + pins.ClusterAutoscaler,
		ui.SymbolWarn + " control plane v1.35.4 (would change)",
		ui.SymbolOK + " Cilium " + pins.Cilium + " (up to date)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run lacks %q:\n%s", want, out)
		}
	}
	if len(rep.Stages) != 4 {
		t.Errorf("stages: %+v", rep.Stages)
	}

	// The roll: the new control-plane machine never runs (its template
	// clone fails), so the roll stops naming it, and deletes nothing.
	go func() {
		for ctx.Err() == nil {
			kcp := &unstructured.Unstructured{}
			kcp.SetGroupVersionKind(clusterapi.KubeadmControlPlaneGVK)
			if err := mc.Get(ctx, types.NamespacedName{Namespace: "lab1", Name: r.ControlPlane}, kcp); err == nil {
				if v, _, _ := unstructured.NestedString(kcp.Object, "spec", "version"); v == "v1.35.4" {
					machine(t, mc, "lab1-control-plane-new", cpLabels, "v1.35.4", false, "cloning the template failed: no template tagged kubernetes-v1.35.4")
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	out, _, _, err = run(func(o *cluster.UpgradeOptions) { o.Timeout = 3 * time.Second })
	want := "Machine lab1/lab1-control-plane-new did not run v1.35.4 within 3.0s: phase Provisioning; InfrastructureReady False: NotReady cloning the template failed: no template tagged kubernetes-v1.35.4"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "run 'labctl cluster upgrade lab1' again") {
		t.Fatalf("the failed roll: %v\nwant %q\n%s", err, want, out)
	}
	if !strings.Contains(out, "+ lab1-control-plane-new v1.35.4 created (") {
		t.Errorf("no progress line for the new machine:\n%s", out)
	}
	kcp := get(t, mc, clusterapi.KubeadmControlPlaneGVK.GroupVersion().String(), "KubeadmControlPlane", "lab1", r.ControlPlane)
	newCPTemplate := refOf(t, kcp, "spec", "machineTemplate", "spec", "infrastructureRef")
	if v, _, _ := unstructured.NestedString(kcp.Object, "spec", "version"); v != "v1.35.4" || newCPTemplate == oldCPTemplate {
		t.Errorf("KubeadmControlPlane: version %s, template %s (was %s)", v, newCPTemplate, oldCPTemplate)
	}
	get(t, mc, clusterapi.ProxmoxMachineTemplateGVK.GroupVersion().String(), "ProxmoxMachineTemplate", "lab1", oldCPTemplate) // kept for the old machine
	get(t, mc, clusterapi.MachineGVK.GroupVersion().String(), "Machine", "lab1", "lab1-control-plane-old")
	md := get(t, mc, clusterapi.MachineDeploymentGVK.GroupVersion().String(), "MachineDeployment", "lab1", "lab1-workers")
	if v, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "version"); v != "v1.35.3" {
		t.Errorf("the pool moved after the control plane failed: %s", v)
	}

	// Once the machine runs (KCP then deletes the old one), a re-run
	// carries on: the control plane is done, the pool at zero moves
	// without a machine, the autoscaler and Cilium are up to date.
	machine(t, mc, "lab1-control-plane-new", cpLabels, "v1.35.4", true, "")
	oldM := &unstructured.Unstructured{}
	oldM.SetGroupVersionKind(clusterapi.MachineGVK)
	oldM.SetNamespace("lab1")
	oldM.SetName("lab1-control-plane-old")
	if err := mc.Delete(ctx, oldM); err != nil {
		t.Fatal(err)
	}
	out, rep, _, err = run(nil)
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, out)
	}
	for _, want := range []string{ui.SymbolOK + " control plane v1.35.4 (up to date)", ui.SymbolOK + " pool workers v1.35.4 (", "cluster lab1 runs Kubernetes v1.35.4"} {
		if !strings.Contains(out, want) {
			t.Errorf("the re-run lacks %q:\n%s", want, out)
		}
	}
	md = get(t, mc, clusterapi.MachineDeploymentGVK.GroupVersion().String(), "MachineDeployment", "lab1", "lab1-workers")
	if v, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "version"); v != "v1.35.4" {
		t.Errorf("pool version %s", v)
	}
	if n := refOf(t, md, "spec", "template", "spec", "infrastructureRef"); n == refOf(t, r.Find("MachineDeployment", "lab1-workers"), "spec", "template", "spec", "infrastructureRef") {
		t.Errorf("the pool kept its template %s", n)
	}
	ms, err := m.List(ctx, clusterapi.MachineGVK, "lab1", "")
	if err != nil || len(ms) != 1 {
		t.Errorf("machines after the roll: %d (%v); want the one control plane: a pool at zero makes none", len(ms), err)
	}
	// scale-from-zero afterwards: the capacity the autoscaler reads is on
	// the MachineDeployment, and the template it names exists.
	if md.GetAnnotations()[clusterapi.AnnotationCPU] == "" {
		t.Errorf("the pool lost its capacity annotations: %v", md.GetAnnotations())
	}
	get(t, mc, clusterapi.ProxmoxMachineTemplateGVK.GroupVersion().String(), "ProxmoxMachineTemplate", "lab1", refOf(t, md, "spec", "template", "spec", "infrastructureRef"))

	// Upgraded: a re-run writes nothing.
	out, _, writes, err = run(nil)
	if err != nil || writes != 0 {
		t.Errorf("the re-run on an upgraded cluster: %v, %d writes\n%s", err, writes, out)
	}
	_ = rep
}

func refOf(t *testing.T, o *unstructured.Unstructured, path ...string) string {
	t.Helper()
	n, _, _ := unstructured.NestedString(o.Object, append(path, "name")...)
	if n == "" {
		t.Fatalf("%s %s has no %v.name", o.GetKind(), o.GetName(), path)
	}
	return n
}

// secretOf is the <cluster>-kubeconfig Secret Cluster API writes.
func secretOf(ns, name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterapi.ClusterNameLabel: ns}},
		Type: "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": kubeconfig}}
}
