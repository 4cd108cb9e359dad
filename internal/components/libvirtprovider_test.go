package components_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/versions"
)

// With management.stack.libvirt.enabled, the stack holds the
// InfrastructureProvider libvirt at labctl's own version, online and
// offline alike, with the offline ConfigMap of the components the binary
// makes (the image: versions.yaml's repository tagged with that version),
// labelled as its spec.fetchConfig.selector asks, in its namespace. No
// offline folder is read for it, and no URL is named.
func TestLibvirtProviderFromTheBinary(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	old := versions.Version
	t.Cleanup(func() { versions.Version = old })
	pins := versions.MustGet()
	for _, tc := range []struct{ labctl, want string }{
		{"v1.2.3", "v1.2.3"},
		{"v0.4.0-3-gdf29312-dirty", "v0.4.0-3-gdf29312-dirty"}, // make build's git describe
		{"dev", release.DevVersion},                            // go build
		{"df29312", release.DevVersion},                        // git describe with no tag yet
		{"1.2.3", release.DevVersion},                          // no v: not a tag
	} {
		versions.Version = tc.labctl
		lab := load(t, "../../examples/lab.yaml")
		lab.Management.Stack.Libvirt = config.LibvirtProvider{Enabled: true}
		for _, offline := range []string{"", offlineTree(t, "kind: List\n")} {
			cs := build(t, lab, components.Options{OfflineDir: offline})
			var c *components.Component
			for i := range cs {
				if cs[i].Name == "InfrastructureProvider libvirt" {
					c = &cs[i]
				}
			}
			if c == nil {
				t.Fatalf("labctl %s, offline %q: no InfrastructureProvider libvirt in %s", tc.labctl, offline, names(cs))
			}
			if c.Version != tc.want || c.Provider.Namespace != release.Namespace {
				t.Errorf("labctl %s: provider %s in %s, want %s in %s", tc.labctl, c.Version, c.Provider.Namespace, tc.want, release.Namespace)
			}
			cr := providerCR(t, *c)
			if v, _, _ := unstructured.NestedString(cr.Object, "spec", "version"); v != tc.want {
				t.Errorf("labctl %s: spec.version %q", tc.labctl, v)
			}
			if _, found, _ := unstructured.NestedString(cr.Object, "spec", "fetchConfig", "url"); found {
				t.Errorf("labctl %s: the provider names a fetchConfig.url", tc.labctl)
			}
			cm, sel := offlineConfigMap(t, *c)
			checkLibvirtConfigMap(t, cm, sel, tc.want, release.Image(pins.LibvirtProvider, tc.want), pins.LibvirtProvider.Platforms)
			// Only a development build is warned that its image is not published.
			w := components.DevBuildWarning(cs, pins)
			if dev := tc.want == release.DevVersion; dev != strings.Contains(w, "no release publishes "+release.Image(pins.LibvirtProvider, release.DevVersion)) ||
				dev != strings.Contains(w, fmt.Sprintf("development build (version %q)", tc.labctl)) {
				t.Errorf("labctl %s: the warning is %q", tc.labctl, w)
			}
		}
		lab.Management.Stack.Libvirt.Enabled = false
		if w := components.DevBuildWarning(build(t, lab, components.Options{}), pins); w != "" {
			t.Errorf("labctl %s without the libvirt provider warns %q", tc.labctl, w)
		}
	}
}

// checkLibvirtConfigMap reads the ConfigMap as cluster-api-operator
// v0.28.0 does (internal/controller/phase_load.go, configmapRepository and
// getComponentsData): found by the selector in the provider's namespace,
// the version from its label, metadata from data.metadata, components
// from data.components or, under the compressed annotation, gzipped in
// binaryData.components.
func checkLibvirtConfigMap(t *testing.T, cm *unstructured.Unstructured, sel map[string]string, version, image string, platforms []string) {
	t.Helper()
	if cm.GetNamespace() != release.Namespace || cm.GetName() != "infrastructure-libvirt-"+version {
		t.Errorf("ConfigMap %s/%s", cm.GetNamespace(), cm.GetName())
	}
	want := map[string]string{
		"provider.cluster.x-k8s.io/name": "libvirt", "provider.cluster.x-k8s.io/type": "infrastructure",
		"provider.cluster.x-k8s.io/version": version,
	}
	for k, v := range want {
		if sel[k] != v || cm.GetLabels()[k] != v {
			t.Errorf("%s: selector %q, ConfigMap label %q, want %q", k, sel[k], cm.GetLabels()[k], v)
		}
	}
	for k, v := range sel {
		if cm.GetLabels()[k] != v {
			t.Errorf("the selector's %s=%s does not match the ConfigMap's labels %v", k, v, cm.GetLabels())
		}
	}
	got, plain, _ := unstructured.NestedString(cm.Object, "data", "components")
	if cm.GetAnnotations()["provider.cluster.x-k8s.io/compressed"] == "true" {
		b64, _, _ := unstructured.NestedString(cm.Object, "binaryData", "components")
		raw, _ := base64.StdEncoding.DecodeString(b64)
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(zr)
		got, plain = string(b), true
	}
	comps, err := release.Components(image, platforms)
	if err != nil {
		t.Fatal(err)
	}
	if !plain || got != string(comps) {
		t.Errorf("the ConfigMap's components are not release.Components(%s)", image)
	}
	meta, _, _ := unstructured.NestedString(cm.Object, "data", "metadata")
	if wantMeta, _ := release.Metadata(version); meta != string(wantMeta) {
		t.Errorf("metadata = %q, want %q", meta, wantMeta)
	}
}
