package components_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"io"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/versions"
)

// The libvirt provider's offline ConfigMap holds the components and
// metadata the binary makes, labelled as the InfrastructureProvider
// libvirt's fetchConfig.selector asks (providers.go), in its namespace.
func TestLibvirtProviderConfigMap(t *testing.T) {
	v := versions.MustGet().LibvirtProvider
	cm, err := components.LibvirtProviderConfigMap(v, "labctl:"+v)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"provider.cluster.x-k8s.io/name": "libvirt", "provider.cluster.x-k8s.io/type": "infrastructure",
		"provider.cluster.x-k8s.io/version": v,
	}
	for k, val := range want {
		if cm.GetLabels()[k] != val {
			t.Errorf("label %s = %q, want %q", k, cm.GetLabels()[k], val)
		}
	}
	if cm.GetNamespace() != release.Namespace || cm.GetName() != "infrastructure-libvirt-"+v {
		t.Errorf("ConfigMap %s/%s", cm.GetNamespace(), cm.GetName())
	}
	comps, err := release.Components("labctl:" + v)
	if err != nil {
		t.Fatal(err)
	}
	got, plain, _ := unstructured.NestedString(cm.Object, "data", "components")
	if !plain {
		b64, _, _ := unstructured.NestedString(cm.Object, "binaryData", "components")
		raw, _ := base64.StdEncoding.DecodeString(b64)
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(zr)
		got = string(b)
	}
	if got != string(comps) {
		t.Error("the ConfigMap's components are not release.Components")
	}
	meta, _, _ := unstructured.NestedString(cm.Object, "data", "metadata")
	if wantMeta, _ := release.Metadata(v); meta != string(wantMeta) {
		t.Errorf("metadata = %q, want %q", meta, wantMeta)
	}
}
