package release_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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
// the image asked for, kept to nodes of the image's platforms.
func TestComponentsApply(t *testing.T) {
	b, err := release.Components("example.test/labctl:v0.1.0", []string{"linux/amd64", "linux/arm64"})
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
		"CustomResourceDefinition/libvirtclustertemplates.infrastructure.labctl.dev",
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
			d := deployment(t, o)
			if img := d.Spec.Template.Spec.Containers[0].Image; img != "example.test/labctl:v0.1.0" {
				t.Errorf("manager image %v", img)
			}
			if os, arches := affinity(t, d); !slices.Equal(os, []string{"linux"}) || !slices.Equal(arches, []string{"amd64", "arm64"}) {
				t.Errorf("manager scheduled on os %v, arch %v; want linux, amd64 and arm64", os, arches)
			}
		}
	}
	for _, bad := range []struct {
		image     string
		platforms []string
		want      string
	}{
		{"", []string{"linux/amd64"}, "no image"},
		{"x:v1.0.0", nil, "no platforms"},
		{"x:v1.0.0", []string{"amd64"}, `platform "amd64" is not os/arch`},
	} {
		if _, err := release.Components(bad.image, bad.platforms); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Components(%q, %v) = %v, want %q", bad.image, bad.platforms, err, bad.want)
		}
	}
}

func deployment(t *testing.T, o *unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// affinity is the os and arch values the Deployment's required node
// affinity allows.
func affinity(t *testing.T, d *appsv1.Deployment) (oses, arches []string) {
	t.Helper()
	a := d.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("the manager has no required node affinity: %+v", a)
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			switch {
			case e.Key == "kubernetes.io/os" && e.Operator == corev1.NodeSelectorOpIn:
				oses = append(oses, e.Values...)
			case e.Key == "kubernetes.io/arch" && e.Operator == corev1.NodeSelectorOpIn:
				arches = append(arches, e.Values...)
			}
		}
	}
	return oses, arches
}

// The provider's version is labctl's when that is a release's (the tag
// with its v), else DevVersion: either way a semantic version the operator
// takes, a label value and an image tag.
func TestVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.1.0": "v0.1.0", "v1.2.3-rc.1": "v1.2.3-rc.1", "v0.1.0-5-gabc1234-dirty": "v0.1.0-5-gabc1234-dirty",
		"dev": release.DevVersion, "0.1.0": release.DevVersion, "abc1234": release.DevVersion, "": release.DevVersion,
		"v1.0.0+meta":                       release.DevVersion, // "+" is neither in a label value nor in an image tag
		"v1.0.0-" + strings.Repeat("x", 60): release.DevVersion,
	} {
		got := release.Version(in)
		if got != want {
			t.Errorf("Version(%q) = %q, want %q", in, got, want)
		}
		if _, err := version.ParseSemantic(got); err != nil {
			t.Errorf("Version(%q) = %q: %v", in, got, err)
		}
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
