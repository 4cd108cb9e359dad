package components_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

const secret = "0d7c2b1e-components-test-secret"

// load loads a lab with HOME pointing at a folder that holds the CA file
// examples/lab.yaml names (testbed.ExampleHome).
func load(t *testing.T, path string) *config.Lab {
	t.Helper()
	testbed.ExampleHome(t)
	lab, _, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

func build(t *testing.T, lab *config.Lab, o components.Options) []components.Component {
	t.Helper()
	cs, err := components.Build(lab, versions.MustGet(), o)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func names(cs []components.Component) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name+" "+c.Version)
	}
	return strings.Join(out, ", ")
}

func providerCR(t *testing.T, c components.Component) *unstructured.Unstructured {
	t.Helper()
	for _, o := range c.Objects {
		if o.GetKind() == c.Provider.GVK.Kind {
			return o
		}
	}
	t.Fatalf("%s has no Provider CR", c.Name)
	return nil
}

// offlineConfigMap is a provider component's ConfigMap and the selector
// its Provider CR finds it by.
func offlineConfigMap(t *testing.T, c components.Component) (*unstructured.Unstructured, map[string]string) {
	t.Helper()
	sel, _, _ := unstructured.NestedStringMap(providerCR(t, c).Object, "spec", "fetchConfig", "selector", "matchLabels")
	for _, o := range c.Objects {
		if o.GetKind() == "ConfigMap" && o.GetLabels()["provider.cluster.x-k8s.io/name"] == c.Provider.Name {
			return o, sel
		}
	}
	t.Fatalf("%s has no ConfigMap of its release", c.Name)
	return nil, nil
}

func TestOwnerLabStackInOrder(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	cs := build(t, load(t, "../../examples/lab.yaml"), components.Options{})
	want := "cert-manager v1.21.2, cluster-api-operator 0.28.0, CoreProvider cluster-api v1.12.11, " +
		"BootstrapProvider kubeadm v1.12.11, ControlPlaneProvider kubeadm v1.12.11, InfrastructureProvider proxmox v0.9.0, " +
		"IPAMProvider in-cluster v1.0.3, cluster-autoscaler RBAC v1.35.0"
	if got := names(cs); got != want {
		t.Errorf("stack:\n%s\nwant:\n%s", got, want)
	}
	if cs[0].Chart.Release.Chart.Repo != "https://charts.jetstack.io" || cs[1].Chart.Release.Chart.Repo != "https://kubernetes-sigs.github.io/cluster-api-operator" {
		t.Errorf("chart repositories: %s, %s", cs[0].Chart.Release.Chart.Repo, cs[1].Chart.Release.Chart.Repo)
	}
	if v := cs[0].Chart.Release.Values["crds"].(map[string]any)["enabled"]; v != true {
		t.Errorf("cert-manager crds.enabled = %v, want true", v)
	}
	// Without ClusterClass no feature gate is set.
	if _, found, _ := unstructured.NestedMap(providerCR(t, cs[2]).Object, "spec", "manager"); found {
		t.Error("CoreProvider has manager settings without clusterClass")
	}
	// CAPMOX: its Secret holds the three variables; only PROXMOX_SECRET is secret.
	capmox := cs[5]
	if len(capmox.Secrets) != 1 || capmox.Secrets[0].Key != "PROXMOX_SECRET" || capmox.Secrets[0].From != "env PVE_TOKEN_SECRET" {
		t.Errorf("CAPMOX secret fields = %+v", capmox.Secrets)
	}
}

func TestSkipLocalFilesRendersNoSecret(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", "")
	cs := build(t, load(t, "../../examples/lab.yaml"), components.Options{LocalFiles: components.SkipLocalFiles})
	for _, c := range cs {
		for _, o := range c.Objects {
			if o.GetKind() == "Secret" {
				t.Errorf("%s renders %s with SkipLocalFiles", c.Name, kube.RefOf(o))
			}
		}
	}
	if ref, _, _ := unstructured.NestedString(providerCR(t, cs[5]).Object, "spec", "configSecret", "name"); ref != "proxmox-variables" {
		t.Errorf("CAPMOX configSecret = %q with SkipLocalFiles; the reference must stay", ref)
	}
}

// A dry run (SkipTokenSecrets) renders CAPMOX's Secret, saying where its
// value would come from, with the value empty: no secret is read, and the
// CA file still is.
func TestSkipTokenSecretsReadsNoSecret(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", "") // restored after the test
	os.Unsetenv("PVE_TOKEN_SECRET")
	cs := build(t, load(t, "../../examples/lab.yaml"), components.Options{LocalFiles: components.SkipTokenSecrets,
		ReadSecret: func(h *config.Hypervisor) (string, error) {
			t.Errorf("a dry run read the token secret of %s", h.Name)
			return secret, nil
		}})
	capmox := cs[5]
	if len(capmox.Secrets) != 1 || capmox.Secrets[0].Key != "PROXMOX_SECRET" || capmox.Secrets[0].From != "env PVE_TOKEN_SECRET" {
		t.Errorf("CAPMOX secret fields = %+v", capmox.Secrets)
	}
	kinds := map[string]bool{}
	for _, o := range capmox.Objects {
		kinds[o.GetKind()+" "+o.GetName()] = true
		if o.GetKind() != "Secret" {
			continue
		}
		if v, found, _ := unstructured.NestedString(o.Object, "data", "PROXMOX_SECRET"); !found || v != "" {
			t.Errorf("PROXMOX_SECRET = %q (found %v) in a dry run, want empty", v, found)
		}
	}
	if !kinds["Secret "+components.ProxmoxSecret] || !kinds["ConfigMap "+components.ProxmoxCA] {
		t.Errorf("a dry run renders %v; want the Secret and the CA ConfigMap", kinds)
	}
}

func TestSecretErrorsNameTheSource(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", "") // restored after the test
	os.Unsetenv("PVE_TOKEN_SECRET")
	_, err := components.Build(load(t, "../../examples/lab.yaml"), versions.MustGet(), components.Options{})
	if err == nil || err.Error() != "hypervisors[pve].proxmox.tokenSecret.env: PVE_TOKEN_SECRET is not set: export PVE_TOKEN_SECRET=<the secret of token root@pam!labctl>" {
		t.Errorf("err = %v", err)
	}
}

func TestOptionalProvidersAndGates(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	lab := load(t, "../../examples/lab.yaml")
	lab.Management.Stack.ClusterClass = true
	lab.Management.Stack.Libvirt = config.LibvirtProvider{Enabled: true}
	lab.Management.Stack.Kamaji = config.OptionalProvider{Enabled: true}
	cs := build(t, lab, components.Options{})
	got := names(cs)
	for _, want := range []string{"InfrastructureProvider libvirt " + release.DevVersion, "ControlPlaneProvider kamaji v0.20.0"} {
		if !strings.Contains(got, want) {
			t.Errorf("stack lacks %s: %s", want, got)
		}
	}
	gates := map[string]bool{}
	for _, c := range cs {
		if c.Provider == nil {
			continue
		}
		cr := providerCR(t, c)
		if g, found, _ := unstructured.NestedBool(cr.Object, "spec", "manager", "featureGates", "ClusterTopology"); found {
			gates[c.Name] = g
		}
	}
	if len(gates) != 2 || !gates["CoreProvider cluster-api"] || !gates["ControlPlaneProvider kubeadm"] {
		t.Errorf("ClusterTopology gates = %v, want core and kubeadm control plane", gates)
	}
}

// TestTenantsLabDerivesItsProviders: the tenants' example enables no
// provider in management.stack, yet its tenants need Kamaji's provider
// and the ClusterTopology gate, and its KVM pool the libvirt provider:
// the install takes them from config.Lab.Providers.
func TestTenantsLabDerivesItsProviders(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	lab := load(t, "../../examples/lab-tenants.yaml")
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	if st := lab.Management.Stack; st.Kamaji.Enabled || st.Libvirt.Enabled || st.ClusterClass {
		t.Fatalf("the example enables providers itself: %+v", st)
	}
	cs := build(t, lab, components.Options{})
	got := names(cs)
	for _, want := range []string{"InfrastructureProvider libvirt " + release.DevVersion, "ControlPlaneProvider kamaji v0.20.0", "tenant ClusterClasses"} {
		if !strings.Contains(got, want) {
			t.Errorf("stack lacks %s: %s", want, got)
		}
	}
	for _, c := range cs {
		if c.Name != "CoreProvider cluster-api" {
			continue
		}
		if g, _, _ := unstructured.NestedBool(providerCR(t, c).Object, "spec", "manager", "featureGates", "ClusterTopology"); !g {
			t.Error("the core provider lacks the ClusterTopology gate tenants need")
		}
	}
}

func TestLibvirtOnlyLabHasNoCAPMOX(t *testing.T) {
	cs := build(t, load(t, "../../examples/local-kvm.yaml"), components.Options{})
	if got := names(cs); strings.Contains(got, "proxmox") {
		t.Errorf("a lab without Proxmox installs CAPMOX: %s", got)
	}
}

func TestHelmChartObjects(t *testing.T) {
	cs := build(t, load(t, "../../examples/local-kvm.yaml"), components.Options{LocalFiles: components.SkipLocalFiles})
	hc, err := cs[1].Chart.HelmChart()
	if err != nil {
		t.Fatal(err)
	}
	spec := hc.Object["spec"].(map[string]any)
	if hc.GetNamespace() != "kube-system" || hc.GetName() != "capi-operator" || spec["chart"] != "cluster-api-operator" ||
		spec["version"] != "0.28.0" || spec["targetNamespace"] != "capi-operator-system" || spec["createNamespace"] != true {
		t.Errorf("HelmChart = %s/%s %v", hc.GetNamespace(), hc.GetName(), spec)
	}
	if !strings.Contains(spec["valuesContent"].(string), "core: {}") {
		t.Errorf("valuesContent = %q", spec["valuesContent"])
	}
}

// offlineTree writes an air-gapped folder: chart archives (any bytes do
// for Build) and each provider's release files.
func offlineTree(t *testing.T, big string) string {
	t.Helper()
	dir := t.TempDir()
	pins := versions.MustGet()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cert-manager-"+pins.CertManagerChartVersion()+".tgz", "chart")
	write("cluster-api-operator-"+pins.ClusterAPIOperatorChartVersion()+".tgz", "chart")
	for _, p := range []struct{ label, version, file, content string }{
		{"cluster-api", pins.ClusterAPI, "core-components.yaml", big},
		{"bootstrap-kubeadm", pins.ClusterAPI, "bootstrap-components.yaml", "kind: List # bootstrap\n"},
		{"control-plane-kubeadm", pins.ClusterAPI, "control-plane-components.yaml", "kind: List # kcp\n"},
		{"infrastructure-proxmox", pins.CAPMOX, "infrastructure-components.yaml", "kind: List # capmox\n"},
		{"ipam-in-cluster", pins.IPAMInCluster, "components.yaml", "kind: List # ipam\n"},
	} {
		write(filepath.Join(p.label, p.version, p.file), p.content)
		write(filepath.Join(p.label, p.version, "metadata.yaml"), "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\n")
	}
	return dir
}

func TestOfflineConfigMaps(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	big := "# core components\n" + strings.Repeat("apiVersion: v1\nkind: ConfigMap\n---\n", 40000) // over a ConfigMap's comfort
	dir := offlineTree(t, big)
	cs := build(t, load(t, "../../examples/lab.yaml"), components.Options{OfflineDir: dir})

	if f := cs[0].Chart.Release.Chart.File; f != filepath.Join(dir, "cert-manager-v1.21.2.tgz") || cs[0].Chart.Release.Chart.Repo != "" {
		t.Errorf("offline cert-manager chart = %+v", cs[0].Chart.Release.Chart)
	}
	hc, err := cs[0].Chart.HelmChart()
	if err != nil {
		t.Fatal(err)
	}
	if c, _, _ := unstructured.NestedString(hc.Object, "spec", "chartContent"); c != base64.StdEncoding.EncodeToString([]byte("chart")) {
		t.Errorf("offline HelmChart carries chartContent %q", c)
	}

	for _, c := range cs[2:7] {
		cm, sel := offlineConfigMap(t, c)
		if cm.GetNamespace() != c.Provider.Namespace {
			t.Errorf("%s ConfigMap in %s, want the provider's namespace %s", c.Name, cm.GetNamespace(), c.Provider.Namespace)
		}
		for k, v := range sel {
			if cm.GetLabels()[k] != v {
				t.Errorf("%s: selector %s=%s does not match the ConfigMap's labels %v", c.Name, k, v, cm.GetLabels())
			}
		}
		if cm.GetLabels()["provider.cluster.x-k8s.io/version"] != c.Version {
			t.Errorf("%s ConfigMap version label = %q", c.Name, cm.GetLabels()["provider.cluster.x-k8s.io/version"])
		}
		md, _, _ := unstructured.NestedString(cm.Object, "data", "metadata")
		if !strings.Contains(md, "kind: Metadata") {
			t.Errorf("%s ConfigMap metadata = %q", c.Name, md)
		}
		comp, plain, _ := unstructured.NestedString(cm.Object, "data", "components")
		if c.Provider.Name == "cluster-api" {
			// Too big for a plain ConfigMap: gzipped, as the operator reads it.
			if plain || cm.GetAnnotations()["provider.cluster.x-k8s.io/compressed"] != "true" {
				t.Fatalf("big components not compressed: plain %v, annotations %v", plain, cm.GetAnnotations())
			}
			b64, _, _ := unstructured.NestedString(cm.Object, "binaryData", "components")
			raw, _ := base64.StdEncoding.DecodeString(b64)
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(zr)
			if string(got) != big {
				t.Error("compressed components do not decompress to the file")
			}
			continue
		}
		if !strings.HasPrefix(comp, "kind: List") {
			t.Errorf("%s ConfigMap components = %q", c.Name, comp)
		}
	}
}

func TestOfflineErrorsNameWhatIsMissing(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	lab := load(t, "../../examples/lab.yaml")
	dir := offlineTree(t, "kind: List\n")
	os.Remove(filepath.Join(dir, "infrastructure-proxmox", "v0.9.0", "infrastructure-components.yaml"))
	_, err := components.Build(lab, versions.MustGet(), components.Options{OfflineDir: dir})
	want := "InfrastructureProvider proxmox needs infrastructure-components.yaml or components.yaml in " + filepath.Join(dir, "infrastructure-proxmox", "v0.9.0")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant it to contain %q", err, want)
	}

	os.Remove(filepath.Join(dir, "cert-manager-v1.21.2.tgz"))
	_, err = components.Build(lab, versions.MustGet(), components.Options{OfflineDir: dir, LocalFiles: components.SkipLocalFiles})
	if err == nil || !strings.Contains(err.Error(), "has no cert-manager-v1.21.2.tgz: put the chart there ('helm pull cert-manager --repo https://charts.jetstack.io --version v1.21.2')") {
		t.Errorf("err = %v", err)
	}

	_, err = components.Build(lab, versions.MustGet(), components.Options{OfflineDir: filepath.Join(dir, "nope"), LocalFiles: components.SkipLocalFiles})
	if err == nil || !strings.Contains(err.Error(), "does not exist or is not a folder") {
		t.Errorf("err = %v", err)
	}
}

// The HelmChart types labctl builds from are helm-controller's at the
// version k3s bundles, labctl's pin in embedded/versions.yaml: go.mod must
// not drift from it.
func TestHelmChartTypesAreThePinnedHelmController(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := versions.MustGet().HelmController
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/k3s-io/helm-controller" {
			if f[1] != want {
				t.Errorf("go.mod requires github.com/k3s-io/helm-controller %s; embedded/versions.yaml pins %s", f[1], want)
			}
			return
		}
	}
	t.Fatal("go.mod does not require github.com/k3s-io/helm-controller: HelmChart is not built from its types")
}
