package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

func tenantsLab(t *testing.T) *config.Lab {
	t.Helper()
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../examples/lab-tenants.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	return lab
}

// TestTenantScaleEditsTheTopology: a tenant's bounds live in its
// Cluster's topology (Cluster API's topology controller would put back a
// change made on the MachineDeployment), so scale writes them there, keeps
// what create wrote beside them, never sets replicas on an autoscaled
// pool, and refuses --replicas there.
func TestTenantScaleEditsTheTopology(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi"))
	mgmt, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	mc := newClient(t, env)
	lab := tenantsLab(t)
	r, err := cluster.Render(lab, "tenant1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := mgmt.Apply(ctx, r.Objects, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying tenant1 as create does: %v", err)
	}
	io, _, out, _ := ui.Test()
	io.Err = out
	opts := cluster.Options{IO: io, Lab: lab, Name: "tenant1", Mgmt: mgmt}
	if err := cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Min: ptr.To(1), Max: ptr.To(7)}); err != nil {
		t.Fatalf("scale: %v\n%s", err, out.String())
	}
	cl := get(t, mc, "cluster.x-k8s.io/v1beta2", "Cluster", "tenant1", "tenant1")
	md, _ := clusterapi.TopologyPool(cl, "workers")
	if md == nil {
		t.Fatalf("scale lost pool workers of the topology: %v", cl.Object["spec"])
	}
	ann, _, _ := unstructured.NestedStringMap(md, "metadata", "annotations")
	if ann[clusterapi.AnnotationMinSize] != "1" || ann[clusterapi.AnnotationMaxSize] != "7" {
		t.Errorf("bounds = %s-%s, want 1-7", ann[clusterapi.AnnotationMinSize], ann[clusterapi.AnnotationMaxSize])
	}
	if ann[clusterapi.AnnotationCPU] != "4" {
		t.Errorf("scale dropped the capacity annotation create wrote: %v", ann)
	}
	if _, has := md["replicas"]; has {
		t.Errorf("scale set replicas %v on an autoscaled pool", md["replicas"])
	}
	if _, has := md["variables"]; !has {
		t.Error("scale dropped the pool's variables")
	}
	err = cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Replicas: ptr.To(2)})
	if err == nil || !strings.Contains(err.Error(), "autoscaled") {
		t.Errorf("--replicas on an autoscaled tenant pool: %v", err)
	}
	err = cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Pool: "nope", Max: ptr.To(2)})
	if err == nil || !strings.Contains(err.Error(), "has no pool nope") || !strings.Contains(err.Error(), "workers") {
		t.Errorf("an unknown pool: %v", err)
	}
	// A re-run of the same scale changes nothing.
	before := cl.GetResourceVersion()
	if err := cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Min: ptr.To(1), Max: ptr.To(7)}); err != nil {
		t.Fatal(err)
	}
	if after := get(t, mc, "cluster.x-k8s.io/v1beta2", "Cluster", "tenant1", "tenant1").GetResourceVersion(); after != before {
		t.Errorf("an unchanged scale wrote the Cluster (%s → %s)", before, after)
	}
}

// TestTenantCreateNeedsTheClusterClass: create refuses, before writing
// anything, a tenant whose ClusterClass 'mgmt install' has not applied.
func TestTenantCreateNeedsTheClusterClass(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "ipam"))
	mgmt, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	io, _, errb, _ := ui.Test()
	io.Err = errb
	err = cluster.Create(t.Context(), cluster.Options{IO: io, Lab: tenantsLab(t), Name: "tenant1", Mgmt: mgmt,
		KubeconfigDir: t.TempDir(), Timeout: 10 * time.Second, DryRun: true})
	if err == nil || !strings.Contains(err.Error(), "ClusterClass "+clusterapi.ClassNamespace+"/labctl-kamaji-proxmox is missing") || !strings.Contains(err.Error(), "labctl mgmt install") {
		t.Errorf("create of a tenant without its ClusterClass: %v", err)
	}
}

// TestTenantDeleteStopsTheControlPlaneFirst: delete scales a tenant's
// control plane to zero through its topology (the topology controller
// would put back a change made on the KamajiControlPlane) and waits for
// the pods to go before it deletes the Cluster, so that nothing writes to
// the datastore after Kamaji clears the tenant's data. The controllers
// are stood in for: the scale-down is done by hand when the topology asks.
func TestTenantDeleteStopsTheControlPlaneFirst(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "kamaji"))
	mgmt, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mgmt.Ctrl()
	if err != nil {
		t.Fatal(err)
	}
	lab := tenantsLab(t)
	r, err := cluster.Render(lab, "tenant1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := mgmt.Apply(ctx, r.Objects, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying tenant1 as create does: %v", err)
	}
	// What the topology controller and Kamaji would have made: the
	// Cluster's controlPlaneRef, and the tenant's Deployment, one pod up.
	const cp = "tenant1-x7k2p"
	clKey := client.ObjectKey{Namespace: "tenant1", Name: "tenant1"}
	cl := &unstructured.Unstructured{}
	cl.SetGroupVersionKind(clusterapi.ClusterGVK)
	must(t, c.Get(ctx, clKey, cl))
	base := cl.DeepCopy()
	must(t, unstructured.SetNestedMap(cl.Object, map[string]any{"apiGroup": clusterapi.KamajiControlPlaneGVK.Group, "kind": "KamajiControlPlane", "name": cp}, "spec", "controlPlaneRef"))
	must(t, c.Patch(ctx, cl, client.MergeFrom(base)))
	dep := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": cp, "namespace": "tenant1"},
		"spec": map[string]any{"replicas": int64(1), "selector": map[string]any{"matchLabels": map[string]any{"app": cp}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": cp}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.35.4"}}}}}}}
	must(t, c.Create(ctx, dep))
	setReplicas := func(n int64) {
		t.Helper()
		base := dep.DeepCopy()
		must(t, unstructured.SetNestedField(dep.Object, n, "status", "replicas"))
		must(t, c.Status().Patch(ctx, dep, client.MergeFrom(base)))
	}
	setReplicas(1)

	io, _, out, _ := ui.Test()
	io.Err = out
	opts := cluster.Options{IO: io, Lab: lab, Name: "tenant1", Mgmt: mgmt, Timeout: time.Minute}
	dry := opts
	dry.DryRun = true
	if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: dry}); err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	want := "would: scale KamajiControlPlane tenant1/" + cp + " through Cluster tenant1/tenant1's spec.topology.controlPlane.replicas to 0 (1 running), so that nothing writes to the datastore after Kamaji clears the tenant's data"
	if !strings.Contains(out.String(), want) {
		t.Errorf("the dry run lacks %q:\n%s", want, out)
	}

	// The stand-in: once the topology asks for 0, the pod goes. The
	// Cluster must still be there then.
	stoodIn := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(clusterapi.ClusterGVK)
			if err := c.Get(ctx, clKey, got); err != nil {
				stoodIn <- fmt.Errorf("the Cluster went before its control plane was scaled to 0: %w", err)
				return
			}
			if n, ok, _ := unstructured.NestedInt64(got.Object, "spec", "topology", "controlPlane", "replicas"); ok && n == 0 {
				if !got.GetDeletionTimestamp().IsZero() {
					stoodIn <- errors.New("the Cluster was deleted before its control plane stopped")
					return
				}
				setReplicas(0)
				stoodIn <- nil
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	out.Reset()
	if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: opts, Yes: true}); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if err := <-stoodIn; err != nil {
		t.Error(err)
	}
	for _, want := range []string{"stop the tenant's control plane", "delete cluster tenant1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("delete lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out.String(), "stop the tenant's control plane") > strings.Index(out.String(), "delete cluster tenant1") {
		t.Errorf("the Cluster was deleted before the control plane stopped:\n%s", out)
	}
	if err := c.Get(ctx, clKey, cl); !apierrors.IsNotFound(err) {
		t.Errorf("the Cluster is still there: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
