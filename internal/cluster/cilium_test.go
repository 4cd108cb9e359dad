package cluster_test

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// A tenant's Cilium is the real chart labctl carries (Cilium 1.18.4's
// install/kubernetes/cilium), rendered for its ClusterResourceSet: what
// kubectl or Cluster API applies as written. So the render holds no
// private key (hubble's certificates are made in the tenant by Cilium's
// certgen Job, at the tenant addons' priority, which raises no pool),
// the same tenant renders the same bytes twice (the ConfigMap does not
// change on every 'cluster create', which would apply Cilium again),
// every namespaced object names kube-system, the agents reach the
// tenant's API server at its endpoint, and it fits in a ConfigMap. A
// kubeadm cluster gets nothing: its Cilium is a Helm release.
func TestTenantCiliumIsTheRealChartWithoutKeys(t *testing.T) {
	lab := tenantsLab(t)
	c, err := lab.Cluster("tenant1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cluster.TenantCilium(t.Context(), lab, c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cluster.TenantCilium(t.Context(), lab, c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Error("tenant1's Cilium renders differently twice; its ClusterResourceSet would apply it again on every create")
	}
	if bytes.Contains(out, []byte("PRIVATE KEY")) {
		t.Error("tenant1's Cilium render holds a private key; it would sit in a ConfigMap and in the printed manifest")
	}
	// Under a ConfigMap's 1 MiB, with room for its metadata.
	if len(out) > 900<<10 {
		t.Errorf("tenant1's Cilium render is %d bytes; a ConfigMap holds at most 1 MiB", len(out))
	}
	objs, err := kube.ParseObjects("tenant1's Cilium", out)
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()+"/"+o.GetName()] = o
		if o.GetKind() == "Secret" {
			t.Errorf("tenant1's Cilium renders Secret %s", o.GetName())
		}
		if ns := o.GetNamespace(); ns != "" && ns != clusterapi.CiliumNamespace && ns != "cilium-secrets" {
			t.Errorf("%s %s is in namespace %q, want %s (or the chart's own cilium-secrets)", o.GetKind(), o.GetName(), ns, clusterapi.CiliumNamespace)
		}
	}
	// The namespace the chart makes comes before what lives in it:
	// Cluster API applies the documents in order.
	if first := objs[0]; first.GetKind() != "Namespace" || first.GetName() != "cilium-secrets" {
		t.Errorf("tenant1's Cilium starts with %s %s, want its Namespace cilium-secrets", first.GetKind(), first.GetName())
	}
	for _, want := range []struct{ obj, priorityAt string }{
		{"Deployment/cilium-operator", "spec.template.spec.priorityClassName"},
		{"Job/hubble-generate-certs", "spec.template.spec.priorityClassName"},
		{"CronJob/hubble-generate-certs", "spec.jobTemplate.spec.template.spec.priorityClassName"},
	} {
		o := byKind[want.obj]
		if o == nil {
			t.Errorf("tenant1's Cilium has no %s", want.obj)
			continue
		}
		if pc, _, _ := unstructured.NestedString(o.Object, strings.Split(want.priorityAt, ".")...); pc != clusterapi.TenantAddonPriorityClass {
			t.Errorf("%s runs at PriorityClass %q, want %s (below the autoscaler's cutoff)", want.obj, pc, clusterapi.TenantAddonPriorityClass)
		}
	}
	ds := byKind["DaemonSet/cilium"]
	if ds == nil {
		t.Fatal("tenant1's Cilium has no agent DaemonSet")
	}
	env := containerEnv(ds)
	if h, p := env["cilium-agent KUBERNETES_SERVICE_HOST"], env["cilium-agent KUBERNETES_SERVICE_PORT"]; h != lab.Management.IP || fmt.Sprint(p) != "6445" {
		t.Errorf("tenant1's Cilium agent reaches the API server at %v:%v, want %s:6445", h, p, lab.Management.IP)
	}
	t.Logf("tenant1's Cilium: %d objects, %d bytes", len(objs), len(out))

	lab1, err := lab.Cluster("lab1")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cluster.TenantCilium(t.Context(), lab, lab1); err != nil || out != nil {
		t.Errorf("lab1, a kubeadm cluster: TenantCilium = %d bytes, %v; want nothing", len(out), err)
	}
}

// A lab whose Cilium chart mirror does not answer gets no tenant
// manifest, which would make a tenant without a CNI, but an error that
// says how to go on offline; a kubeadm cluster's manifest needs no chart.
func TestTenantManifestNeedsItsCiliumChart(t *testing.T) {
	lab := tenantsLab(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	lab.Management.Stack.ChartRepos.Cilium = closed
	io, _, out, _ := ui.Test()
	err = cluster.PrintObjects(t.Context(), io, lab, "tenant1", "yaml")
	if err == nil || !strings.Contains(err.Error(), "management.stack.offlineDir") || out.Len() != 0 {
		t.Fatalf("tenant1's manifest with the chart mirror down: %v, %d bytes printed; want an error naming management.stack.offlineDir and nothing printed", err, out.Len())
	}
	if err := cluster.PrintObjects(t.Context(), io, lab, "lab1", "yaml"); err != nil || !strings.Contains(out.String(), "kind: KubeadmControlPlane") {
		t.Errorf("lab1's manifest with the chart mirror down: %v", err)
	}
}

// containerEnv is the env values of a workload object's pod template, by
// "<container> <variable>".
func containerEnv(obj *unstructured.Unstructured) map[string]any {
	env := map[string]any{}
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		c, _ := c.(map[string]any)
		vars, _ := c["env"].([]any)
		for _, v := range vars {
			v, _ := v.(map[string]any)
			env[fmt.Sprint(c["name"], " ", v["name"])] = v["value"]
		}
	}
	return env
}
