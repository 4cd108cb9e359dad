package components_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/versions"
)

// kamajiLab is the owner's lab with Kamaji enabled.
func kamajiLab(t *testing.T) *config.Lab {
	t.Helper()
	t.Setenv("PVE_TOKEN_SECRET", secret)
	lab := load(t, "../../examples/lab.yaml")
	lab.Management.Stack.Kamaji.Enabled = true
	// The tenant ClusterClasses put the owner's key on every node.
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	return lab
}

const ownerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"

func byName(t *testing.T, cs []components.Component, name string) components.Component {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no component %q in %s", name, names(cs))
	return components.Component{}
}

// Kamaji, its datastore and its provider come after the other providers,
// each at its pin, and only when the lab needs Kamaji.
func TestKamajiStackOnlyWhenNeeded(t *testing.T) {
	pins := versions.MustGet()
	lab := kamajiLab(t)
	lab.Management.Stack.Kamaji.Enabled = false
	if got := names(build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles})); strings.Contains(strings.ToLower(got), "kamaji") {
		t.Errorf("Kamaji without management.stack.kamaji.enabled: %s", got)
	}
	lab.Management.Stack.Kamaji.Enabled = true
	got := names(build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles}))
	want := "IPAMProvider in-cluster " + pins.IPAMInCluster +
		", Kamaji " + pins.Kamaji.Version +
		", Kamaji datastore (kamaji-etcd) " + pins.KamajiEtcd.Chart +
		", ControlPlaneProvider kamaji " + pins.KamajiControlPlane +
		", cluster-autoscaler RBAC"
	if !strings.Contains(got, want) {
		t.Errorf("stack = %s\nwant in order: %s", got, want)
	}
}

// Kamaji's chart is the one the binary carries, at the pinned version,
// with the image, the migration image and telemetry set; it goes to
// helm-controller inside the HelmChart, online or not.
func TestKamajiChartFromTheBinary(t *testing.T) {
	pins := versions.MustGet()
	for _, offline := range []string{"", offlineTree(t, "kind: List\n")} {
		if offline != "" {
			if err := os.WriteFile(filepath.Join(offline, "kamaji-etcd-"+pins.KamajiEtcd.Chart+".tgz"), []byte("etcd chart"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cs := build(t, kamajiLab(t), components.Options{OfflineDir: offline, LocalFiles: components.SkipLocalFiles})
		k := byName(t, cs, "Kamaji")
		r := k.Chart.Release
		if r.Name != "kamaji" || r.Namespace != "kamaji-system" || r.Chart.Repo != "" || r.Chart.File != "" || len(r.Chart.Archive) == 0 {
			t.Fatalf("offline %q: Kamaji release = %s/%s chart %+v", offline, r.Namespace, r.Name, r.Chart)
		}
		ch, err := loader.LoadArchive(bytes.NewReader(r.Chart.Archive))
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.Name != "kamaji" || ch.Metadata.Version != pins.Kamaji.Version || ch.Metadata.AppVersion != pins.Kamaji.Version || len(ch.Metadata.Dependencies) != 0 {
			t.Errorf("embedded chart: %s %s appVersion %s, dependencies %v", ch.Metadata.Name, ch.Metadata.Version, ch.Metadata.AppVersion, ch.Metadata.Dependencies)
		}
		v := r.Values
		img, _ := v["image"].(map[string]any)
		tel, _ := v["telemetry"].(map[string]any)
		if img["repository"] != pins.Kamaji.Image || img["tag"] != pins.Kamaji.Version || img["pullPolicy"] != "IfNotPresent" || tel["disabled"] != true {
			t.Errorf("Kamaji values: image %v, telemetry %v", img, tel)
		}
		if args, _ := v["extraArgs"].([]any); len(args) != 1 || args[0] != "--migrate-image="+pins.Kamaji.ImageRef() {
			t.Errorf("Kamaji extraArgs = %v", v["extraArgs"])
		}
		if v["defaultDatastoreName"] != components.KamajiDataStore {
			t.Errorf("defaultDatastoreName = %v", v["defaultDatastoreName"])
		}
		hc, err := k.Chart.HelmChart()
		if err != nil {
			t.Fatal(err)
		}
		content, _, _ := unstructured.NestedString(hc.Object, "spec", "chartContent")
		if content != base64.StdEncoding.EncodeToString(r.Chart.Archive) {
			t.Error("the Kamaji HelmChart does not carry the embedded chart")
		}
		if repo, _, _ := unstructured.NestedString(hc.Object, "spec", "repo"); repo != "" {
			t.Errorf("the Kamaji HelmChart names repo %q", repo)
		}
	}
}

// The datastore: the kamaji-etcd chart from its pinned repository (or the
// offline folder), one member on k3s's local-path volumes, certificates
// from cert-manager, the pinned etcd image, and the DataStore Kamaji uses
// by default.
func TestKamajiDatastoreChart(t *testing.T) {
	pins := versions.MustGet()
	cs := build(t, kamajiLab(t), components.Options{LocalFiles: components.SkipLocalFiles})
	e := byName(t, cs, "Kamaji datastore (kamaji-etcd)")
	r := e.Chart.Release
	if r.Chart.Repo != "https://clastix.github.io/charts" || r.Chart.Name != "kamaji-etcd" || r.Chart.Version != "0.15.0" || r.Namespace != "kamaji-system" {
		t.Errorf("datastore chart = %+v in %s", r.Chart, r.Namespace)
	}
	if len(e.Chart.StatefulSets) != 1 || e.Chart.StatefulSets[0] != "kamaji-etcd" {
		t.Errorf("datastore readiness = StatefulSets %v", e.Chart.StatefulSets)
	}
	v := r.Values
	pvc, _ := v["persistentVolumeClaim"].(map[string]any)
	img, _ := v["image"].(map[string]any)
	cm, _ := v["certManager"].(map[string]any)
	ds, _ := v["datastore"].(map[string]any)
	if v["replicas"] != float64(1) || pvc["storageClassName"] != "local-path" || pvc["retentionPolicyWhenDeleted"] != "Retain" {
		t.Errorf("datastore values: replicas %v, volume %v", v["replicas"], pvc)
	}
	if r, _ := img["repository"].(string); r+":"+fmt.Sprint(img["tag"]) != pins.KamajiEtcd.EtcdImage {
		t.Errorf("etcd image %v, want %s", img, pins.KamajiEtcd.EtcdImage)
	}
	if cm["enabled"] != true || v["selfSignedCertificates"].(map[string]any)["enabled"] != false {
		t.Errorf("certificates: certManager %v, selfSigned %v", cm, v["selfSignedCertificates"])
	}
	if ds["enabled"] != true || ds["name"] != components.KamajiDataStore || v["fullnameOverride"] != "kamaji-etcd" {
		t.Errorf("datastore %v, fullnameOverride %v", ds, v["fullnameOverride"])
	}

	dir := offlineTree(t, "kind: List\n")
	_, err := components.Build(kamajiLab(t), pins, components.Options{OfflineDir: dir, LocalFiles: components.SkipLocalFiles})
	if want := "has no kamaji-etcd-0.15.0.tgz: put the chart there ('helm pull kamaji-etcd --repo https://clastix.github.io/charts --version 0.15.0')"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("offline without the datastore chart: %v", err)
	}
}

// The provider goes to the operator from the components the binary
// carries, online and offline alike (the ConfigMap, gzipped: they are
// over 1 MB), unless management.stack.kamaji.fetchURL names a place.
func TestKamajiProviderFromTheBinary(t *testing.T) {
	pins := versions.MustGet()
	lab := kamajiLab(t)
	p := byName(t, build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles}), "ControlPlaneProvider kamaji")
	if p.Provider.Namespace != "kamaji-system" || p.Provider.Version != pins.KamajiControlPlane {
		t.Errorf("provider %+v", p.Provider)
	}
	cm, sel := offlineConfigMap(t, p)
	if sel["provider.cluster.x-k8s.io/version"] != pins.KamajiControlPlane || cm.GetName() != "control-plane-kamaji-"+pins.KamajiControlPlane {
		t.Errorf("ConfigMap %s, selector %v", cm.GetName(), sel)
	}
	b64, _, _ := unstructured.NestedString(cm.Object, "binaryData", "components")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the provider's components are not gzipped in the ConfigMap: %v", err)
	}
	comps, _ := io.ReadAll(zr)
	if want := "image: docker.io/clastix/cluster-api-control-plane-provider-kamaji:" + pins.KamajiControlPlane; !strings.Contains(string(comps), want) {
		t.Errorf("the components lack %q", want)
	}
	if md, _, _ := unstructured.NestedString(cm.Object, "data", "metadata"); !strings.Contains(md, "contract: v1beta2") {
		t.Errorf("metadata = %q", md)
	}

	lab.Management.Stack.Kamaji.FetchURL = "https://example.test/releases"
	p = byName(t, build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles}), "ControlPlaneProvider kamaji")
	cr := providerCR(t, p)
	if u, _, _ := unstructured.NestedString(cr.Object, "spec", "fetchConfig", "url"); u != "https://example.test/releases" {
		t.Errorf("with fetchURL: spec.fetchConfig = %v", cr.Object["spec"])
	}
	for _, o := range p.Objects {
		if o.GetKind() == "ConfigMap" {
			t.Errorf("with fetchURL the provider still carries ConfigMap %s", o.GetName())
		}
	}
}

// The tenant ClusterClasses go in after the Kamaji provider, as
// manifests: the classes clusterapi renders for the lab, one per platform.
func TestTenantClusterClassesAfterTheProvider(t *testing.T) {
	lab := kamajiLab(t)
	if names := names(build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles})); strings.Contains(names, "tenant ClusterClasses") {
		t.Errorf("tenant ClusterClasses in a lab with no tenant: %s", names)
	}
	lab = load(t, "../../examples/lab-tenants.yaml")
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	cs := build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles})
	if got := names(cs); !strings.Contains(got, "ControlPlaneProvider kamaji "+versions.MustGet().KamajiControlPlane+", tenant ClusterClasses") {
		t.Errorf("stack = %s", got)
	}
	c := byName(t, cs, "tenant ClusterClasses")
	if c.Install != components.ManifestInstall {
		t.Errorf("tenant ClusterClasses install = %v", c.Install)
	}
	var classes []string
	for _, o := range c.Objects {
		if o.GetKind() == "ClusterClass" {
			classes = append(classes, o.GetName())
		}
	}
	if len(classes) == 0 {
		t.Errorf("no ClusterClass among %d objects", len(c.Objects))
	}
}

// A lab with a KVM tenant gets the Kamaji provider's variables in its
// configSecret and labctl's RBAC on LibvirtClusters, without which the
// provider never writes a KVM tenant's endpoint (the box test proves it
// on the real provider); a lab without one gets neither.
func TestKamajiProviderPatchesLibvirtClustersForKVMTenants(t *testing.T) {
	lab := kamajiLab(t)
	p := byName(t, build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles}), "ControlPlaneProvider kamaji")
	if _, found, _ := unstructured.NestedMap(providerCR(t, p).Object, "spec", "configSecret"); found {
		t.Errorf("a lab without KVM tenants: configSecret %v", providerCR(t, p).Object["spec"])
	}
	for _, o := range p.Objects {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Secret" {
			t.Errorf("a lab without KVM tenants carries %s %s", o.GetKind(), o.GetName())
		}
	}

	lab = load(t, "../../examples/lab-tenants.yaml") // tenant2 is on KVM
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	p = byName(t, build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles}), "ControlPlaneProvider kamaji")
	ref, _, _ := unstructured.NestedStringMap(providerCR(t, p).Object, "spec", "configSecret")
	if ref["name"] != components.KamajiProviderVariables || ref["namespace"] != components.KamajiNamespace {
		t.Errorf("configSecret = %v", ref)
	}
	var secret, role, binding *unstructured.Unstructured
	for _, o := range p.Objects {
		switch o.GetKind() {
		case "Secret":
			secret = o
		case "ClusterRole":
			role = o
		case "ClusterRoleBinding":
			binding = o
		}
	}
	if secret == nil || role == nil || binding == nil {
		t.Fatalf("objects %v: want the variables Secret and the RBAC", names([]components.Component{p}))
	}
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	for k, v := range map[string]string{"CACPPK_DYNAMIC_INFRASTRUCTURE_CLUSTER_PATCH": "true", "CACPPK_INFRASTRUCTURE_CLUSTERS": "LibvirtCluster"} {
		if got, _ := base64.StdEncoding.DecodeString(data[k]); string(got) != v {
			t.Errorf("variable %s = %q, want %q", k, got, v)
		}
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if len(rules) != 1 || fmt.Sprint(rules[0]) != "map[apiGroups:[infrastructure.labctl.dev] resources:[libvirtclusters] verbs:[get list watch patch]]" {
		t.Errorf("ClusterRole rules = %v", rules)
	}
	subj, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if len(subj) != 1 || fmt.Sprint(subj[0]) != "map[kind:ServiceAccount name:capi-kamaji-controller-manager namespace:kamaji-system]" {
		t.Errorf("ClusterRoleBinding subjects = %v", subj)
	}
}
