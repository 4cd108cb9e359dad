package release_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// decode splits components YAML into objects.
func decode(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := r.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// A real kube-apiserver takes every object of the components, in their
// order: the namespace, the three CRDs, the RBAC, the Deployment with
// the image asked for.
func TestComponentsApply(t *testing.T) {
	b, err := release.Components("example.test/labctl:v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, b)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if o.GetLabels()["cluster.x-k8s.io/provider"] != "infrastructure-libvirt" {
			t.Errorf("%s %s lacks the provider label", o.GetKind(), o.GetName())
		}
	}
	for _, want := range []string{
		"Namespace/" + release.Namespace,
		"CustomResourceDefinition/libvirtclusters.infrastructure.labctl.dev",
		"CustomResourceDefinition/libvirtmachines.infrastructure.labctl.dev",
		"CustomResourceDefinition/libvirtmachinetemplates.infrastructure.labctl.dev",
		"ClusterRole/labctl-libvirt-provider", "ClusterRole/capi-labctl-libvirt",
		"ServiceAccount/capl-manager", "ClusterRoleBinding/labctl-libvirt-provider",
		"Deployment/capl-controller-manager",
	} {
		if !slices.Contains(kinds, want) {
			t.Errorf("components lack %s; they hold %v", want, kinds)
		}
	}
	env := testbed.Start(t)
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Errorf("the API server refused %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() == "Deployment" {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			if img := cs[0].(map[string]any)["image"]; img != "example.test/labctl:v0.1.0" {
				t.Errorf("manager image %v", img)
			}
		}
	}
	if _, err := release.Components(""); err == nil || !strings.Contains(err.Error(), "image") {
		t.Errorf("no image: %v", err)
	}
}

// clusterctl's own Metadata type reads metadata.yaml, and finds contract
// v1beta2 for the version.
func TestMetadataNamesTheContract(t *testing.T) {
	b, err := release.Metadata("v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	var m clusterctlv1.Metadata
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatal(err)
	}
	rs := m.GetReleaseSeriesForVersion(version.MustParseSemantic("v0.1.3"))
	if rs == nil || rs.Contract != "v1beta2" {
		t.Errorf("release series for v0.1.3 = %+v, want contract v1beta2", rs)
	}
	if _, err := release.Metadata("latest"); err == nil {
		t.Error("Metadata(latest) took it")
	}
}
