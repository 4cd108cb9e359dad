package clusterapi_test

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strings"
	"testing"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/versions"
)

const tenantsExample = "../../examples/lab-tenants.yaml"

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind())
	}
	return out
}

// topologyPool is pool's entry in the Cluster's topology.
func topologyPool(t *testing.T, cl *unstructured.Unstructured, pool string) map[string]any {
	t.Helper()
	md, others := clusterapi.TopologyPool(cl, pool)
	if md == nil {
		t.Fatalf("Cluster %s has no topology pool %s; it has %v", cl.GetName(), pool, others)
	}
	return md
}

// variable is the value of a Cluster topology variable (or an override).
func variable(t *testing.T, list []any, name string) any {
	t.Helper()
	for _, x := range list {
		if v := x.(map[string]any); v["name"] == name {
			return v["value"]
		}
	}
	t.Fatalf("no variable %s in %v", name, list)
	return nil
}

// TestTenantIsOneCluster: a tenant on Proxmox renders as its Namespace
// and one Cluster of the Proxmox tenant class (and its addons,
// TestTenantAddons), carrying its port, version
// and pool; the autoscaler's bounds and scale-from-zero capacity are in
// the pool's metadata and its replicas are never set.
func TestTenantIsOneCluster(t *testing.T) {
	lab := load(t, tenantsExample)
	r := render(t, lab, "tenant1")
	if got := kinds(r.Objects); !slices.Equal(got, []string{"Namespace", "Cluster", "ConfigMap", "ClusterResourceSet"}) {
		t.Fatalf("tenant1 objects = %v, want Namespace, Cluster and its addons' ConfigMap and ClusterResourceSet", got)
	}
	cl := r.Objects[1]
	for path, want := range map[string]any{
		"spec.topology.classRef.name":         "labctl-kamaji-proxmox",
		"spec.topology.classRef.namespace":    clusterapi.ClassNamespace,
		"spec.topology.version":               "v1.35.4",
		"spec.clusterNetwork.apiServerPort":   int64(6445),
		"spec.topology.controlPlane.replicas": int64(1),
	} {
		if got := field(t, cl, splitPath(path)...); got != want {
			t.Errorf("Cluster %s = %v, want %v", path, got, want)
		}
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(cl.Object, "spec", "controlPlaneEndpoint"); found {
		t.Error("the tenant's Cluster sets controlPlaneEndpoint; the Kamaji provider fills it")
	}
	vars, _, _ := unstructured.NestedSlice(cl.Object, "spec", "topology", "variables")
	if got := variable(t, vars, "nodeIPRange"); got != "192.168.4.60-192.168.4.69" {
		t.Errorf("nodeIPRange = %v", got)
	}
	if got := variable(t, vars, "allowedNodes"); !equalJSON(got, []any{"pv1-1"}) {
		t.Errorf("allowedNodes = %v, want [pv1-1]", got)
	}
	if got := variable(t, vars, "memoryAdjustment"); got != int64(160) {
		t.Errorf("memoryAdjustment = %v (%T), want 160", got, got)
	}
	md := topologyPool(t, cl, "workers")
	if _, has := md["replicas"]; has {
		t.Errorf("the autoscaled pool sets replicas %v; the autoscaler owns them", md["replicas"])
	}
	if md["class"] != "worker" {
		t.Errorf("pool class = %v, want worker", md["class"])
	}
	ann, _, _ := unstructured.NestedStringMap(md, "metadata", "annotations")
	for k, want := range map[string]string{
		clusterapi.AnnotationMinSize: "0", clusterapi.AnnotationMaxSize: "5",
		clusterapi.AnnotationCPU: "4", clusterapi.AnnotationMaxPods: "110",
		clusterapi.AnnotationLabels: "labctl.dev/pool=workers",
	} {
		if ann[k] != want {
			t.Errorf("pool annotation %s = %q, want %q", k, ann[k], want)
		}
	}
	over, _, _ := unstructured.NestedSlice(md, "variables", "overrides")
	machine, _ := variable(t, over, "machine").(map[string]any)
	if machine["numCores"] != int64(4) || machine["memoryMiB"] != int64(2048) {
		t.Errorf("machine = %v, want 4 cores and 2048 MiB", machine)
	}
	if tags, _, _ := unstructured.NestedStringSlice(machine, "templateSelector", "matchTags"); !slices.Contains(tags, "labctl-image-ubuntu-2404-kube") {
		t.Errorf("machine templateSelector tags = %v, want the image's", tags)
	}
	taints, _ := variable(t, over, "nodeTaints").([]any)
	if len(taints) != 1 || taints[0].(map[string]any)["key"] != clusterapi.StartupTaint {
		t.Errorf("nodeTaints = %v, want Cilium's startup taint", taints)
	}
	if r.ControlPlane != "tenant1-control-plane" || r.Pools[0].MachineDeployment != "tenant1-workers" || !r.Pools[0].Autoscaled {
		t.Errorf("names: control plane %s, pool %+v", r.ControlPlane, r.Pools[0])
	}
	if dep := r.Find("Deployment", clusterapi.AutoscalerName); dep == nil {
		t.Error("the tenant has no cluster-autoscaler")
	}
	host, port := clusterapi.Endpoint(lab, mustCluster(t, lab, "tenant1"))
	if host != "192.168.4.21" || port != 6445 {
		t.Errorf("Endpoint = %s:%d, want the management VM's 192.168.4.21:6445", host, port)
	}
	if v := clusterapi.CiliumValues(lab, mustCluster(t, lab, "tenant1")); v["k8sServiceHost"] != "192.168.4.21" || v["k8sServicePort"] != 6445 {
		t.Errorf("Cilium reaches the tenant at %v:%v", v["k8sServiceHost"], v["k8sServicePort"])
	}
	// The operator runs on a worker of a tenant (there is no other
	// node): at the chart's system-cluster-critical it would keep the
	// last worker, so it runs below the autoscaler's cutoff there.
	for cluster, want := range map[string]any{"tenant1": clusterapi.TenantAddonPriorityClass, "lab1": nil} {
		op, _ := clusterapi.CiliumValues(lab, mustCluster(t, lab, cluster))["operator"].(map[string]any)
		if got := op["priorityClassName"]; got != want {
			t.Errorf("%s: Cilium operator.priorityClassName %v, want %v", cluster, got, want)
		}
	}
	// On a kubeadm cluster it stays on the control plane, which never
	// scales, so that the workers can all go.
	op, _ := clusterapi.CiliumValues(lab, mustCluster(t, lab, "lab1"))["operator"].(map[string]any)
	if sel, _ := op["nodeSelector"].(map[string]any); len(sel) != 1 || sel[clusterapi.ControlPlaneRoleLabel] != "" {
		t.Errorf("lab1: Cilium operator.nodeSelector %v, want the control-plane role", op["nodeSelector"])
	}
}

// TestTenantAddons: the tenant's manifest carries, for Cluster API's
// ClusterResourceSet to apply inside the tenant (so kubectl apply of it
// alone gives the tenant DNS), CoreDNS at a priority below the
// autoscaler's cutoff, its Service at the address Kamaji gives the
// tenant's kubelets; and the class has no Kamaji CoreDNS addon, which
// would apply kubeadm's at system-cluster-critical.
func TestTenantAddons(t *testing.T) {
	lab := load(t, tenantsExample)
	c := mustCluster(t, lab, "tenant1")
	c.ServiceCIDR = "10.112.0.0/16"
	r := render(t, lab, "tenant1")
	crs := r.Find("ClusterResourceSet", "tenant1-addons")
	cm := r.Find("ConfigMap", "tenant1-addons")
	if crs == nil || cm == nil || crs.GetNamespace() != "tenant1" || cm.GetNamespace() != "tenant1" {
		t.Fatalf("tenant1's manifest has no ClusterResourceSet and ConfigMap tenant1/tenant1-addons: %v", kinds(r.Objects))
	}
	for path, want := range map[string]any{
		"spec.clusterSelector.matchLabels": map[string]any{"cluster.x-k8s.io/cluster-name": "tenant1"},
		"spec.resources":                   []any{map[string]any{"kind": "ConfigMap", "name": "tenant1-addons"}},
		"spec.strategy":                    "Reconcile",
	} {
		if got, _, _ := unstructured.NestedFieldNoCopy(crs.Object, splitPath(path)...); !reflect.DeepEqual(got, want) {
			t.Errorf("ClusterResourceSet %s = %v, want %v", path, got, want)
		}
	}
	if l := r.Find("Cluster", "tenant1").GetLabels()["cluster.x-k8s.io/cluster-name"]; l != "tenant1" {
		t.Errorf("the Cluster's cluster-name label %q: the ClusterResourceSet would select nothing", l)
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "addons.yaml")
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(data, "---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("the ConfigMap's addons.yaml: %v\n%s", err, doc)
		}
		objs = append(objs, u)
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = o
	}
	pc := byKind["PriorityClass"]
	if pc == nil || pc.GetName() != clusterapi.TenantAddonPriorityClass {
		t.Fatalf("no PriorityClass %s among %v", clusterapi.TenantAddonPriorityClass, kinds(objs))
	}
	if v, ok := pc.Object["value"].(float64); !ok || v >= clusterapi.ExpendableCutoff {
		t.Errorf("PriorityClass value %v, want below the autoscaler's --expendable-pods-priority-cutoff %d", v, clusterapi.ExpendableCutoff)
	}
	dep := byKind["Deployment"]
	if got, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "priorityClassName"); got != clusterapi.TenantAddonPriorityClass {
		t.Errorf("CoreDNS priorityClassName %q, want %s", got, clusterapi.TenantAddonPriorityClass)
	}
	ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if img := ctrs[0].(map[string]any)["image"]; img != "registry.k8s.io/coredns/coredns:"+versions.MustGet().CoreDNS {
		t.Errorf("CoreDNS image %v, want the pinned one", img)
	}
	if ip, _, _ := unstructured.NestedString(byKind["Service"].Object, "spec", "clusterIP"); ip != "10.112.0.10" {
		t.Errorf("kube-dns clusterIP %q, want 10.112.0.10 (the Service CIDR's first address plus 10, as Kamaji sets clusterDNS)", ip)
	}
	if cf, _, _ := unstructured.NestedString(byKind["ConfigMap"].Object, "data", "Corefile"); !strings.Contains(cf, "kubernetes cluster.local in-addr.arpa ip6.arpa") {
		t.Errorf("Corefile does not serve cluster.local:\n%s", cf)
	}

	classes, err := clusterapi.TenantClusterClasses(clusterapi.Input{Lab: lab, Credentials: creds{}, Pins: versions.MustGet()})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range classes {
		if o.GetKind() != "KamajiControlPlaneTemplate" {
			continue
		}
		addons, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec", "addons")
		if _, ok := addons["coreDNS"]; ok || addons["kubeProxy"] == nil {
			t.Errorf("the tenant class's Kamaji addons %v, want kube-proxy only", addons)
		}
	}
}

func mustCluster(t *testing.T, lab *config.Lab, name string) *config.Cluster {
	t.Helper()
	c, err := lab.Cluster(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return out
}

// TestKVMTenant: a tenant on KVM hosts also has its node address pool
// and the hosts' credentials Secrets (with the data the credentials
// reader gives), and its LibvirtCluster spec in the class's variable.
func TestKVMTenant(t *testing.T) {
	lab := load(t, tenantsExample)
	r := render(t, lab, "tenant2")
	if got := kinds(r.Objects); !slices.Equal(got, []string{"Namespace", "Secret", "Secret", "InClusterIPPool", "Cluster", "ConfigMap", "ClusterResourceSet"}) {
		t.Fatalf("tenant2 objects = %v", got)
	}
	for i, host := range []string{"kvm1", "kvm2"} {
		s := r.Objects[1+i]
		data, _, _ := unstructured.NestedStringMap(s.Object, "data")
		if s.GetName() != "tenant2-libvirt-"+host || data["ssh-privatekey"] != base64.StdEncoding.EncodeToString(creds{}.data(host)["ssh-privatekey"]) {
			t.Errorf("credentials Secret %d = %s with %v, want %s's with the reader's data", i, s.GetName(), data, host)
		}
	}
	if got := field(t, r.Objects[3], "metadata", "name"); got != "tenant2-nodes" {
		t.Errorf("pool = %v", got)
	}
	cl := r.Objects[4]
	if got := field(t, cl, "spec", "topology", "classRef", "name"); got != "labctl-kamaji-kvm" {
		t.Errorf("class = %v", got)
	}
	vars, _, _ := unstructured.NestedSlice(cl.Object, "spec", "topology", "variables")
	lc, _ := variable(t, vars, "libvirtCluster").(map[string]any)
	if name, _, _ := unstructured.NestedString(lc, "ipPool", "name"); name != "tenant2-nodes" {
		t.Errorf("libvirtCluster ipPool = %q, want tenant2-nodes", name)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(lc, "controlPlaneEndpoint"); found {
		t.Error("libvirtCluster sets controlPlaneEndpoint; the Kamaji provider's endpoint goes there")
	}
	hosts, _, _ := unstructured.NestedSlice(lc, "hosts")
	if len(hosts) != 2 {
		t.Errorf("libvirtCluster hosts = %v, want kvm1 and kvm2", hosts)
	}
	md := topologyPool(t, cl, "kvm")
	ann, _, _ := unstructured.NestedStringMap(md, "metadata", "annotations")
	if ann[clusterapi.AnnotationMinSize] != "0" || ann[clusterapi.AnnotationMaxSize] != "3" {
		t.Errorf("kvm pool bounds = %v, want 0..3", ann)
	}
	if _, has := ann[clusterapi.AnnotationCPU]; has {
		t.Error("a KVM pool carries a cpu capacity annotation; the provider publishes status.capacity")
	}
	if _, has := md["replicas"]; has {
		t.Error("the autoscaled KVM pool sets replicas")
	}
}

// TestTenantClusterClasses: a lab with tenants gets one class per worker
// platform it has, sharing the Kamaji control plane template; a lab
// without tenants gets none.
func TestTenantClusterClasses(t *testing.T) {
	in := clusterapi.Input{Lab: load(t, tenantsExample), Credentials: creds{}, Pins: versions.MustGet()}
	objs, err := clusterapi.TenantClusterClasses(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Namespace", "KamajiControlPlaneTemplate",
		"ProxmoxClusterTemplate", "KubeadmConfigTemplate", "ProxmoxMachineTemplate", "ClusterClass",
		"LibvirtClusterTemplate", "KubeadmConfigTemplate", "LibvirtMachineTemplate", "ClusterClass"}
	if got := kinds(objs); !slices.Equal(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	for _, o := range objs[1:] {
		if o.GetNamespace() != clusterapi.ClassNamespace {
			t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	cp := objs[1]
	if got := field(t, cp, "spec", "template", "spec", "network", "serviceAddress"); got != "192.168.4.21" {
		t.Errorf("the control plane's Service address = %v, want the management VM's", got)
	}
	if got := field(t, cp, "spec", "template", "spec", "network", "serviceType"); got != "LoadBalancer" {
		t.Errorf("serviceType = %v, want LoadBalancer (k3s ServiceLB)", got)
	}
	if got := field(t, objs[2], "spec", "template", "spec", "externalManagedControlPlane"); got != true {
		t.Error("the ProxmoxClusterTemplate does not let the Kamaji provider set the endpoint")
	}
	px := objs[5]
	if got := field(t, px, "spec", "controlPlane", "templateRef", "kind"); got != "KamajiControlPlaneTemplate" {
		t.Errorf("proxmox class control plane = %v", got)
	}
	naming := field(t, px, "spec", "workers", "machineDeployments").([]any)[0].(map[string]any)["naming"]
	if !equalJSON(naming, map[string]any{"template": "{{ .cluster.name }}-{{ .machineDeployment.topologyName }}"}) {
		t.Errorf("pool naming = %v, want <cluster>-<pool>", naming)
	}
	// Every variable a tenant Cluster sets is one the class declares.
	declared := map[string]bool{}
	vars, _, _ := unstructured.NestedSlice(px.Object, "spec", "variables")
	for _, v := range vars {
		declared[v.(map[string]any)["name"].(string)] = true
	}
	cl := render(t, in.Lab, "tenant1").Objects[1]
	set, _, _ := unstructured.NestedSlice(cl.Object, "spec", "topology", "variables")
	for _, v := range set {
		name := v.(map[string]any)["name"].(string)
		if !declared[name] {
			t.Errorf("tenant1 sets variable %s, which the class does not declare", name)
		}
		delete(declared, name)
	}
	if len(declared) > 0 {
		t.Errorf("the class requires variables tenant1 does not set: %v", declared)
	}

	none, err := clusterapi.TenantClusterClasses(clusterapi.Input{Lab: load(t, "../../examples/lab.yaml"), Credentials: creds{}})
	if err != nil || none != nil {
		t.Errorf("a lab without tenants got classes %v (%v)", kinds(none), err)
	}
}

// TestInfrastructurePatchIsYAML: the ipv4Config patch template, executed
// as Cluster API executes it (Go text/template over the variables), is the
// ipv4Config CAPMOX wants.
func TestInfrastructurePatchIsYAML(t *testing.T) {
	objs, err := clusterapi.TenantClusterClasses(clusterapi.Input{Lab: load(t, tenantsExample), Credentials: creds{}})
	if err != nil {
		t.Fatal(err)
	}
	var src string
	for _, p := range field(t, objs[5], "spec", "patches").([]any) {
		for _, d := range p.(map[string]any)["definitions"].([]any) {
			for _, jp := range d.(map[string]any)["jsonPatches"].([]any) {
				if m := jp.(map[string]any); m["path"] == "/spec/template/spec/ipv4Config" {
					src, _, _ = unstructured.NestedString(m, "valueFrom", "template")
				}
			}
		}
	}
	tmpl, err := template.New("ipv4Config").Option("missingkey=error").Parse(src)
	if err != nil {
		t.Fatalf("template %q: %v", src, err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, map[string]any{"nodeIPRange": "192.168.4.60-192.168.4.69"}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatalf("the patch is not YAML: %v\n%s", err, b.String())
	}
	want := map[string]any{"addresses": []any{"192.168.4.60-192.168.4.69"}, "gateway": "192.168.4.1", "prefix": float64(24)}
	if !equalJSON(got, want) {
		t.Errorf("ipv4Config = %v, want %v", got, want)
	}
}
