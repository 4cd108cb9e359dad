package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

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
	r, err := cluster.Render(lab, "tenant1")
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
