package components_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

// clusterScoped are the kinds the Kamaji charts render that have no
// namespace; Helm puts every other object into the release's namespace.
var clusterScoped = []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace",
	"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "DataStore"}

// What Kamaji's part of the stack puts on the cluster is accepted by a
// real kube-apiserver with the real CRDs: the objects of Kamaji's chart
// (the one the binary carries) and of the kamaji-etcd chart v0.15.0, as
// Helm renders them with labctl's values (CRDs and hooks included),
// with cert-manager's CRDs from its real chart and Kamaji's from its
// chart; the DataStore the datastore chart makes passes Kamaji's schema.
// And the provider's components the binary carries, as the operator
// applies them (clusterctl's variables at their defaults).
func TestKamajiObjectsAcceptedByTheAPIServer(t *testing.T) {
	pins := versions.MustGet()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cs := build(t, kamajiLab(t), components.Options{LocalFiles: components.SkipLocalFiles})
	kamaji := byName(t, cs, "Kamaji").Chart.Release
	etcd := byName(t, cs, "Kamaji datastore (kamaji-etcd)").Chart.Release

	// The kamaji-etcd chart, packaged from its source as its release
	// does (its Chart.yaml carries the version).
	src := testbed.UpstreamSource(t, "kamaji-etcd-v"+pins.KamajiEtcd.Chart)
	dir := t.TempDir()
	ch, err := loadChartDir(filepath.Join(src, "charts", "kamaji-etcd"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != pins.KamajiEtcd.Chart {
		t.Fatalf("%s is kamaji-etcd %s, not the pinned %s", src, ch.Metadata.Version, pins.KamajiEtcd.Chart)
	}
	if etcd.Chart.File, err = chartutil.Save(ch, dir); err != nil {
		t.Fatal(err)
	}
	etcd.Chart.Repo = ""

	env := testbed.Start(t)
	kc := kube.NewForConfig(env.Config, env.Kubeconfig)
	hc := helm.New(env.Config)
	render := func(r helm.Release) []*unstructured.Unstructured {
		t.Helper()
		data, err := hc.Render(ctx, r, pins.K3s)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kube.ParseObjects(r.Name, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetNamespace() == "" && !slices.Contains(clusterScoped, o.GetKind()) {
				o.SetNamespace(r.Namespace)
			}
		}
		return objs
	}
	apply := func(what string, objs []*unstructured.Unstructured) {
		t.Helper()
		if _, err := kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
			t.Fatalf("%s: the API server refused: %v", what, err)
		}
	}
	kinds := func(objs []*unstructured.Unstructured, keep func(*unstructured.Unstructured) bool) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, o := range objs {
			if keep(o) {
				out = append(out, o)
			}
		}
		return out
	}
	isCRD := func(o *unstructured.Unstructured) bool { return o.GetKind() == "CustomResourceDefinition" }
	isWebhook := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "ValidatingWebhookConfiguration" || o.GetKind() == "MutatingWebhookConfiguration"
	}

	cmFile := standin.UpstreamChart(t, t.TempDir(), standin.CertManager)
	cm := render(helm.Release{Name: "cert-manager", Namespace: "cert-manager", Chart: helm.Chart{Name: "cert-manager", Version: pins.CertManagerChartVersion(), File: cmFile},
		Values: map[string]any{"crds": map[string]any{"enabled": true}}})
	apply("cert-manager's CRDs", kinds(cm, isCRD))

	k := render(kamaji)
	kcrds := kinds(k, isCRD)
	for _, name := range components.KamajiCRDs {
		if !slices.ContainsFunc(kcrds, func(o *unstructured.Unstructured) bool { return o.GetName() == name }) {
			t.Errorf("Kamaji's chart brings no CRD %s", name)
		}
	}
	apply("Kamaji's CRDs", kcrds)
	apply("Namespace kamaji-system", []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": kamaji.Namespace}}}})

	// The datastore before Kamaji's webhooks, which would send the
	// DataStore to a Kamaji this test does not run.
	e := render(etcd)
	apply("the kamaji-etcd chart's objects", e)
	ds, found, err := kc.Get(ctx, kube.Ref{GVK: dataStoreGVK, Name: components.KamajiDataStore})
	if err != nil || !found {
		t.Fatalf("DataStore %s: found %v, %v", components.KamajiDataStore, found, err)
	}
	eps, _, _ := unstructured.NestedStringSlice(ds.Object, "spec", "endpoints")
	if want := []string{"kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379"}; !slices.Equal(eps, want) {
		t.Errorf("DataStore endpoints = %v, want %v (one member)", eps, want)
	}
	if n, _, _ := unstructured.NestedString(ds.Object, "spec", "tlsConfig", "certificateAuthority", "privateKey", "secretReference", "name"); n != "kamaji-etcd-ca" {
		t.Errorf("DataStore CA key from %q, want cert-manager's CA Secret kamaji-etcd-ca", n)
	}
	sts, found, err := kc.Get(ctx, kube.Ref{GVK: kube.StatefulSetGVK, Namespace: etcd.Namespace, Name: "kamaji-etcd"})
	if err != nil || !found {
		t.Fatalf("StatefulSet kamaji-etcd: %v %v", found, err)
	}
	checkEtcdStatefulSet(t, sts, pins.KamajiEtcd.EtcdImage)

	rest := kinds(k, func(o *unstructured.Unstructured) bool { return !isCRD(o) })
	apply("Kamaji's chart objects", append(kinds(rest, func(o *unstructured.Unstructured) bool { return !isWebhook(o) }), kinds(rest, isWebhook)...))
	d, found, err := kc.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: kamaji.Namespace, Name: components.KamajiRelease})
	if err != nil || !found {
		t.Fatalf("Deployment kamaji: %v %v", found, err)
	}
	checkKamajiDeployment(t, d, pins)

	// The provider's components, as the operator applies them.
	cf, _ := components.KamajiProviderFiles(pins)
	gz, err := embedded.FS.ReadFile(cf)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	out, err := yamlprocessor.NewSimpleProcessor().Process(raw, func(k string) (string, error) { return "", errNoVar(k) })
	if err != nil {
		t.Fatal(err)
	}
	objs, err := upstream.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	apply("the Kamaji provider's components", objs)
	if served, err := kc.Serves(kamajiControlPlaneGVK); err != nil || !served {
		t.Errorf("%s is not served after the provider's components (%v)", kamajiControlPlaneGVK, err)
	}
}

var (
	dataStoreGVK          = schema.GroupVersionKind{Group: "kamaji.clastix.io", Version: "v1alpha1", Kind: "DataStore"}
	kamajiControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha2", Kind: "KamajiControlPlane"}
)

func loadChartDir(dir string) (*chart.Chart, error) { return loader.LoadDir(dir) }

type errNoVar string

func (e errNoVar) Error() string { return "variable " + string(e) + " has no default" }

// checkEtcdStatefulSet: one member, the pinned image, its data on a
// local-path volume that outlives the StatefulSet.
func checkEtcdStatefulSet(t *testing.T, sts *unstructured.Unstructured, image string) {
	t.Helper()
	if n, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas"); n != 1 {
		t.Errorf("etcd replicas = %d, want 1", n)
	}
	if p, _, _ := unstructured.NestedString(sts.Object, "spec", "persistentVolumeClaimRetentionPolicy", "whenDeleted"); p != "Retain" {
		t.Errorf("etcd PVC retention when deleted = %q, want Retain", p)
	}
	vcts, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	if len(vcts) != 1 {
		t.Fatalf("etcd volumeClaimTemplates = %v", vcts)
	}
	if sc, _, _ := unstructured.NestedString(vcts[0].(map[string]any), "spec", "storageClassName"); sc != "local-path" {
		t.Errorf("etcd data volume class = %q, want local-path", sc)
	}
	cs, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	if c["image"] != image {
		t.Errorf("etcd image = %v, want %s", c["image"], image)
	}
	args, _, _ := unstructured.NestedStringSlice(c, "command")
	if !slices.Contains(args, "--data-dir=/var/run/etcd") {
		t.Errorf("etcd command = %v", args)
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	if !slices.ContainsFunc(mounts, func(m any) bool {
		mm := m.(map[string]any)
		return mm["name"] == "data" && mm["mountPath"] == "/var/run/etcd"
	}) {
		t.Errorf("etcd's data-dir is not on the data volume: %v", mounts)
	}
}

// checkKamajiDeployment: the pinned image, telemetry off, the default
// DataStore, the migration image pinned, and the webhook certificate
// (whose ca.crt --webhook-ca-path reads by default) mounted.
func checkKamajiDeployment(t *testing.T, d *unstructured.Unstructured, pins versions.Pins) {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	if c["image"] != pins.Kamaji.ImageRef() {
		t.Errorf("Kamaji image = %v, want %s", c["image"], pins.Kamaji.ImageRef())
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, want := range []string{"--disable-telemetry", "--datastore=" + components.KamajiDataStore, "--migrate-image=" + pins.Kamaji.ImageRef()} {
		if !slices.Contains(args, want) {
			t.Errorf("Kamaji args lack %s: %v", want, args)
		}
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	if !slices.ContainsFunc(mounts, func(m any) bool {
		return m.(map[string]any)["mountPath"] == "/tmp/k8s-webhook-server/serving-certs"
	}) {
		t.Errorf("no webhook certificate where --webhook-ca-path looks: %v", mounts)
	}
}
