package box_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/embedded"
	labcluster "github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// The real Kamaji (e51909f, from its own chart), the real Kamaji
// control-plane provider v0.20.0 and the real Cluster API core v1.12.10,
// each from what its project releases, run by the runner: a Cluster with
// a KamajiControlPlane and a ProxmoxCluster (externalManagedControlPlane)
// becomes a TenantControlPlane whose three containers the runner runs,
// storing in a TLS etcd of the test bed (a DataStore, its CA key PKCS #1).
// What is checked is inside the tenant, through the kubeconfig the
// provider writes: the objects kubeadm's phases leave (Kamaji reports the
// TenantControlPlane Ready from its Deployment alone, even when they
// failed). Deleting the Cluster leaves no TenantControlPlane and nothing
// under the tenant's prefix in the datastore.
//
// CAPMOX is not run here (it needs the fake PVE and its setup): the test
// sets the ProxmoxCluster's status.initialization itself, the one field
// CAPMOX would (docs/testing.md). Kamaji runs in a network namespace of
// its own, so its webhook's port 9443 leaves CAPMOX's free.
func TestKamajiTenantControlPlane(t *testing.T) {
	box.Require(t, "cluster-api", "kamaji", "kamaji-provider", "kube-controller-manager", "kube-scheduler")
	box.KamajiSource(t)
	b := box.Start(t, box.Bare(), box.WithCRDsOf("capmox"))
	kc := kube.NewForConfig(b.Env.Config, b.Env.Kubeconfig)
	cl, err := client.New(b.Env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	// The provider with the clusterctl variables mgmt install puts in its
	// configSecret for a lab with KVM tenants (the operator substitutes
	// them from there), so that it patches LibvirtClusters.
	etcd := kamajiStack(ctx, t, b, kc, kamajiSetup{releases: []string{"cluster-api", "kamaji-provider"},
		vars: components.KamajiLibvirtVariables, dataStore: "labctl"})
	port := freePort(t)
	// In the namespace labctl gives a cluster, so 'labctl cluster
	// delete' finds it.
	const name = "t1"
	ns := clusterapi.Namespace(name)
	objs := parse(t, fmt.Sprintf(proxmoxTenant, ns, name)+"---\n"+tenantYAML(ns, name, port, schema.GroupKind{Group: "infrastructure.cluster.x-k8s.io", Kind: "ProxmoxCluster"}))
	start := time.Now()
	if _, err := kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying the DataStore and the tenant: %v", err)
	}

	// The provider patches the ProxmoxCluster's endpoint with the
	// TenantControlPlane's; CAPMOX would then report it provisioned.
	pc := endpointPatched(ctx, t, cl, schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha2", Kind: "ProxmoxCluster"}, ns, name, "127.0.0.1", port)
	base := pc.DeepCopy()
	_ = unstructured.SetNestedField(pc.Object, true, "status", "initialization", "provisioned")
	if err := cl.Status().Patch(ctx, pc, client.MergeFrom(base)); err != nil {
		t.Fatalf("reporting the ProxmoxCluster provisioned (CAPMOX's part): %v", err)
	}

	// The kubeconfig the provider writes, and the tenant's API through it.
	var tenant *kubernetes.Clientset
	waitUntil(ctx, t, 5*time.Minute, "Secret "+name+"-kubeconfig and the tenant's cluster-info", func() {}, func() (bool, string) {
		s, err := kubernetes.NewForConfigOrDie(b.Env.Config).CoreV1().Secrets(ns).Get(ctx, name+"-kubeconfig", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if s.Type != "cluster.x-k8s.io/secret" || len(s.Data["value"]) == 0 {
			return false, fmt.Sprintf("Secret type %s, keys %d", s.Type, len(s.Data))
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
		if err != nil {
			return false, err.Error()
		}
		if want := "https://127.0.0.1:" + strconv.Itoa(port); cfg.Host != want {
			return false, "kubeconfig server " + cfg.Host + ", want " + want
		}
		cfg.Timeout = 5 * time.Second
		tenant = kubernetes.NewForConfigOrDie(cfg)
		_, err = tenant.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			return false, "tenant: " + err.Error()
		}
		return true, ""
	})
	t.Logf("tenant %s/%s: created to cluster-info served in %s", ns, name, time.Since(start).Round(time.Second))

	tenantHasKubeadmState(ctx, t, tenant, versions.MustGet().Kubernetes)

	// The tenant's control plane: three processes of the runner.
	tcpProc := b.Runner.Proc(ns, name)
	if tcpProc == nil || len(tcpProc.Pod) != 3 {
		t.Fatalf("runner: the TenantControlPlane's Deployment %s/%s runs %v, want kube-apiserver, kube-controller-manager and kube-scheduler", ns, name, tcpProc)
	}
	rss := map[string]string{}
	for _, p := range append([]*runner.Proc{b.Runner.Proc("kamaji-system", "kamaji"), b.Runner.Proc("kamaji-system", "capi-kamaji-controller-manager")}, tcpProc.Pod...) {
		rss[p.Container+" ("+p.Deployment+")"] = vmRSS(p.Pid())
	}
	t.Logf("RSS: %v", rss)

	// Deleting the Cluster deletes the TenantControlPlane and its data.
	tcp := &unstructured.Unstructured{}
	tcp.SetGroupVersionKind(schema.GroupVersionKind{Group: "kamaji.clastix.io", Version: "v1alpha1", Kind: "TenantControlPlane"})
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tcp); err != nil {
		t.Fatal(err)
	}
	schemaName, _, _ := unstructured.NestedString(tcp.Object, "status", "storage", "setup", "schema")
	if schemaName == "" {
		t.Fatalf("TenantControlPlane status.storage.setup.schema is empty: %v", tcp.Object["status"])
	}
	prefix := "/" + schemaName + "/"
	if n, err := etcd.Count(ctx, prefix); err != nil || n == 0 {
		t.Fatalf("datastore keys under %s before delete: %d, %v; want the tenant's", prefix, n, err)
	}
	// labctl cluster delete: it scales the KamajiControlPlane to 0 and
	// waits for the tenant's pods to go before it deletes the Cluster.
	// Kamaji deletes the tenant's data in its finalizer while the tenant's
	// kube-apiserver still runs (the Deployment goes by garbage collection
	// after), which writes its leases again: measured here, 4 keys were
	// left when the Cluster was deleted at once.
	io, _, out, _ := ui.Test()
	io.Err = out
	if err := labcluster.Delete(ctx, labcluster.DeleteOptions{Yes: true, Options: labcluster.Options{IO: io, Name: name, Mgmt: kc, Timeout: 3 * time.Minute}}); err != nil {
		t.Fatalf("labctl cluster delete %s: %v\n%s", name, err, out)
	}
	if !strings.Contains(out.String(), "stop the tenant's control plane") {
		t.Errorf("cluster delete did not stop the tenant's control plane first:\n%s", out)
	}
	waitUntil(ctx, t, 3*time.Minute, "the TenantControlPlane gone and no data under "+prefix, func() {}, func() (bool, string) {
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tcp)
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("TenantControlPlane: %v", err)
		}
		n, err := etcd.Count(ctx, prefix)
		if err != nil || n != 0 {
			return false, fmt.Sprintf("%d keys under %s (%v)", n, prefix, err)
		}
		return true, ""
	})
	if p := b.Runner.Proc(ns, name); p != nil {
		t.Errorf("runner still runs the deleted tenant's %s", p.Pod)
	}

	// A KVM tenant: its infrastructure is a LibvirtCluster, which the
	// provider patches only with the variables above and labctl's RBAC
	// (components.KamajiLibvirtRBAC); without them it answers
	// "unsupported infrastructure provider" and never writes the endpoint.
	crds, err := fs.Glob(embedded.FS, "provider/libvirt/crds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var objs2 []*unstructured.Unstructured
	for _, f := range crds {
		raw, err := embedded.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs2 = append(objs2, parse(t, string(raw))...)
	}
	objs2 = append(objs2, components.KamajiLibvirtRBAC()...)
	port2 := freePort(t)
	const name2 = "t2"
	objs2 = append(objs2, parse(t, fmt.Sprintf(kvmTenant, name2)+"---\n"+tenantYAML(name2, name2, port2, schema.GroupKind{Group: "infrastructure.labctl.dev", Kind: "LibvirtCluster"}))...)
	if _, err := kc.Apply(ctx, objs2, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying the KVM tenant: %v", err)
	}
	endpointPatched(ctx, t, cl, schema.GroupVersionKind{Group: "infrastructure.labctl.dev", Version: "v1alpha1", Kind: "LibvirtCluster"}, name2, name2, "127.0.0.1", port2)
}

// endpointPatched waits until the Kamaji provider has written the
// tenant's endpoint, 127.0.0.1 at port, into the infrastructure cluster
// of kind gvk, and returns that object.
func endpointPatched(ctx context.Context, t testing.TB, cl client.Client, gvk schema.GroupVersionKind, ns, name, host string, port int) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	waitUntil(ctx, t, 5*time.Minute, "the "+gvk.Kind+"'s controlPlaneEndpoint patched by the provider", func() {}, func() (bool, string) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return false, err.Error()
		}
		ep, _, _ := unstructured.NestedMap(u.Object, "spec", "controlPlaneEndpoint")
		return ep["host"] == host && fmt.Sprint(ep["port"]) == strconv.Itoa(port), fmt.Sprintf("endpoint %v", ep)
	})
	return u
}

// kvmTenant is the namespace and LibvirtCluster of a KVM tenant.
// Formatted with its name (also its namespace).
const kvmTenant = `apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: infrastructure.labctl.dev/v1alpha1
kind: LibvirtCluster
metadata: {name: %[1]s, namespace: %[1]s}
spec:
  hosts: [{name: kvm1, uri: "qemu+ssh://labctl@127.0.0.1/system", credentialsRef: {name: %[1]s-libvirt-kvm1}}]
  network: {network: labctl}
  ipPool: {kind: InClusterIPPool, name: %[1]s-nodes}
`

// tenantYAML is a tenant's KamajiControlPlane, exposed on loopback at port,
// and its Cluster on the infrastructure cluster of that kind and name.
func tenantYAML(ns, name string, port int, infra schema.GroupKind) string {
	return fmt.Sprintf(`apiVersion: controlplane.cluster.x-k8s.io/v1alpha2
kind: KamajiControlPlane
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  dataStoreName: labctl
  version: v1.35.4
  replicas: 1
  network:
    serviceType: ClusterIP
    serviceAddress: 127.0.0.1
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  clusterNetwork:
    apiServerPort: %[3]d
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KamajiControlPlane, name: %[2]s}
  infrastructureRef: {apiGroup: %[4]s, kind: %[5]s, name: %[2]s}
`, ns, name, port, infra.Group, infra.Kind)
}

// tenantHasKubeadmState checks what kubeadm's phases leave in a tenant
// (Kamaji's KubeadmPhase resources at e51909f: upload-config,
// bootstrap-token), through the admin kubeconfig the provider writes:
// Kamaji reports the TenantControlPlane Ready from its Deployment alone,
// even when they failed.
func tenantHasKubeadmState(ctx context.Context, t testing.TB, tenant kubernetes.Interface, version string) {
	t.Helper()
	kcfg, err := tenant.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("tenant: kubeadm-config: %v", err)
	}
	if cc := kcfg.Data["ClusterConfiguration"]; !strings.Contains(cc, "kubernetesVersion: "+version) {
		t.Errorf("tenant kubeadm-config ClusterConfiguration lacks kubernetesVersion %s:\n%s", version, cc)
	}
	for _, crb := range []string{"kubeadm:kubelet-bootstrap", "kubeadm:node-autoapprove-bootstrap", "kubeadm:node-autoapprove-certificate-rotation", "kubeadm:get-nodes"} {
		if _, err := tenant.RbacV1().ClusterRoleBindings().Get(ctx, crb, metav1.GetOptions{}); err != nil {
			t.Errorf("tenant: ClusterRoleBinding %s (kubeadm's bootstrap-token phase): %v", crb, err)
		}
	}
	if _, err := tenant.RbacV1().Roles("kube-public").Get(ctx, "kubeadm:bootstrap-signer-clusterinfo", metav1.GetOptions{}); err != nil {
		t.Errorf("tenant: Role kube-public/kubeadm:bootstrap-signer-clusterinfo: %v", err)
	}
	// The admin kubeconfig is the tenant's cluster admin (in one run here
	// it was Forbidden when the phases had failed).
	if _, err := tenant.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("tenant: the provider's kubeconfig cannot list Secrets in kube-system: %v", err)
	}
}

// proxmoxTenant is a tenant's namespace and its ProxmoxCluster, whose
// control plane is managed elsewhere (tenantYAML adds its
// KamajiControlPlane and Cluster). Formatted with the namespace and name.
const proxmoxTenant = `apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha2
kind: ProxmoxCluster
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  externalManagedControlPlane: true
  ipv4Config: {addresses: [127.77.1.10-127.77.1.20], prefix: 24, gateway: 127.77.1.1}
  dnsServers: [127.77.1.1]
`

// kamajiSetup is what kamajiStack installs besides Kamaji.
type kamajiSetup struct {
	// releases are the upstream releases applied as they are (the
	// runner runs their Deployments): "kamaji-provider", and
	// "cluster-api" when the box runs no core provider of its own.
	releases []string
	// vars are the clusterctl variables substituted into the Kamaji
	// provider's release.
	vars map[string]string
	// dataStore is the DataStore made on the test's etcd; "default" is
	// the one the kamaji-etcd chart makes in a lab, which Kamaji gives
	// every TenantControlPlane that names none (labctl's values).
	dataStore string
}

// kamajiStack installs Kamaji as 'mgmt install' does, but for its
// datastore: cert-manager (the real chart: Kamaji's webhook certificate
// is cert-manager's), the releases, Kamaji's own chart with labctl's
// values, and in place of the kamaji-etcd chart (a StatefulSet, which
// the runner does not run) a TLS etcd of the test bed with a DataStore
// on it, its CA key PKCS #1 as Kamaji e51909f needs. Kamaji runs in a
// network namespace of its own (runner.Image.OwnNetwork) that reaches
// the etcd's port.
func kamajiStack(ctx context.Context, t testing.TB, b *box.Box, kc *kube.Client, s kamajiSetup) *box.Etcd {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	installCertManager(ctx, t, b)
	deps := map[string][]string{"kamaji-system": {"capi-kamaji-controller-manager", "kamaji"}}
	for _, name := range s.releases {
		rel, err := upstream.ReleaseOf(ctx, root, name)
		if err != nil {
			t.Fatal(err)
		}
		var vars map[string]string
		if name == "kamaji-provider" {
			vars = s.vars
		}
		data, err := rel.Substitute(vars)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kube.ParseObjects(name+" components", data)
		if err != nil {
			t.Fatal(err)
		}
		// As the operator installs them: clusterctl's move (a backup)
		// finds the kinds to take by this label on their CRDs.
		for _, o := range objs {
			testbed.LabelAsTheOperator(o)
		}
		if _, err := kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
			t.Fatalf("applying %s's components: %v", name, err)
		}
		if name == "cluster-api" {
			deps["capi-system"] = []string{"capi-controller-manager"}
		}
	}
	// labctl's values (embedded/manifests/mgmt/kamaji-values.yaml) but
	// the image, which is the test bed's; no kamaji-etcd.
	values := embeddedValues(t, "manifests/mgmt/kamaji-values.yaml")
	delete(values, "image")
	values["kamaji-etcd"] = map[string]any{"deploy": false}
	values["defaultDatastoreName"] = ""
	if s.dataStore == components.KamajiDataStore {
		values["defaultDatastoreName"] = s.dataStore
	}
	if _, err := kc.Apply(ctx, box.KamajiChart(t, components.KamajiNamespace, values), kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying Kamaji's chart: %v", err)
	}
	for ns, names := range deps {
		if err := kc.WaitFor(ctx, kube.DeploymentGVK, ns, names, kube.DeploymentAvailable(), 4*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	etcd := b.StartEtcd(t)
	_, etcdPort, _ := strings.Cut(etcd.Endpoint, ":")
	if n, err := strconv.Atoi(etcdPort); err == nil {
		b.Runner.Reach(n)
	}
	objs := parse(t, fmt.Sprintf(dataStoreYAML, s.dataStore, etcd.Endpoint,
		indent(string(etcd.CACert)), indent(string(etcd.CAKey)), indent(string(etcd.Client.Cert)), indent(string(etcd.Client.Key))))
	if _, err := kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying the DataStore %s: %v", s.dataStore, err)
	}
	return etcd
}

// dataStoreYAML is a DataStore on the test's etcd, its CA and the root
// client certificate in a Secret. Formatted with its name, the etcd
// endpoint and the four PEMs.
const dataStoreYAML = `apiVersion: kamaji.clastix.io/v1alpha1
kind: DataStore
metadata:
  name: %[1]s
spec:
  driver: etcd
  endpoints: [%[2]s]
  tlsConfig:
    certificateAuthority:
      certificate: {secretReference: {name: %[1]s-datastore-certs, namespace: kamaji-system, keyPath: ca.crt}}
      privateKey: {secretReference: {name: %[1]s-datastore-certs, namespace: kamaji-system, keyPath: ca.key}}
    clientCertificate:
      certificate: {secretReference: {name: %[1]s-datastore-certs, namespace: kamaji-system, keyPath: tls.crt}}
      privateKey: {secretReference: {name: %[1]s-datastore-certs, namespace: kamaji-system, keyPath: tls.key}}
---
apiVersion: v1
kind: Secret
metadata: {name: %[1]s-datastore-certs, namespace: kamaji-system}
stringData:
  ca.crt: |
%[3]s
  ca.key: |
%[4]s
  tls.crt: |
%[5]s
  tls.key: |
%[6]s
`

func parse(t testing.TB, doc string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kube.ParseObjects("test objects", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// indent indents a PEM under a YAML block scalar.
func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// freePort reserves a loopback port for the test's tenant: the runner
// keeps it as kube-apiserver's port (runner.Image.PodPorts).
func freePort(t testing.TB) int {
	t.Helper()
	p, release, err := testbed.ReservePort()
	if err != nil {
		t.Fatal(err)
	}
	// Released now: the runner takes the port's lock itself when it
	// starts the tenant's kube-apiserver.
	release()
	return p
}

// vmRSS is a process's resident set, as /proc says it.
func vmRSS(pid int) string {
	kib, err := rssKiB(pid)
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(kib) + " kB"
}

// rssKiB is a process's resident set in KiB (/proc/<pid>/status VmRSS).
func rssKiB(pid int) (int, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// Kamaji's real chart, as the box installs it, gives the runner what it
// runs Kamaji from: the image at the test bed's tag, --disable-telemetry,
// and a webhook certificate Secret mounted where --webhook-ca-path looks.
// No API server: this is what TestKamajiTenantControlPlane stands on.
func TestKamajiChartRunsUnderTheRunner(t *testing.T) {
	objs := box.KamajiChart(t, "kamaji-system", map[string]any{
		"telemetry": map[string]any{"disabled": true}, "kamaji-etcd": map[string]any{"deploy": false}, "defaultDatastoreName": "",
	})
	var d *unstructured.Unstructured
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetKind() == "Deployment" && o.GetName() == "kamaji" {
			d = o
		}
	}
	if d == nil || kinds["CustomResourceDefinition"] < 2 || kinds["Certificate"] != 1 || kinds["MutatingWebhookConfiguration"] != 1 {
		t.Fatalf("Kamaji's chart rendered %v; want its Deployment, CRDs, Certificate and webhooks", kinds)
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	im, ok := runner.Match(c["image"].(string), versions.MustGet())
	if !ok || im.Binary != "kamaji" {
		t.Fatalf("the runner does not run the chart's image %s", c["image"])
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if !slices.Contains(args, "--disable-telemetry") {
		t.Errorf("chart args %q lack --disable-telemetry", args)
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	found := false
	for _, m := range mounts {
		if m.(map[string]any)["mountPath"] == "/tmp/k8s-webhook-server/serving-certs" {
			found = true
		}
	}
	if !found {
		t.Errorf("the chart mounts no webhook certificate where --webhook-ca-path defaults to: %v", mounts)
	}
}
