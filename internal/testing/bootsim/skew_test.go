package bootsim

import (
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/testing/pvetest"
)

// The kubelet a VM reports is its template's, read from the tag labctl
// gives the template; a VM without one stays unbooted, saying why.
func TestImageKubeletFromTheTemplateTag(t *testing.T) {
	vm := pvetest.VM{Config: map[string]string{"tags": "labctl;labctl-image-ubuntu-2404;kubernetes-v1.35.3"}}
	if v, err := imageKubelet(vm); err != nil || v != "v1.35.3" {
		t.Errorf("imageKubelet = %q, %v; want v1.35.3", v, err)
	}
	vm.Config["tags"] = "labctl;kubernetes-latest"
	if _, err := imageKubelet(vm); err == nil || !strings.Contains(err.Error(), "kubernetes-<version>") {
		t.Errorf("a VM with no versioned tag: %v, want an error naming the tag it lacks", err)
	}
}

// kubeadm's preflight: a kubelet of a newer minor than the control
// plane, or more than three minors older, does not join.
func TestKubeletSkewAsKubeadmChecksIt(t *testing.T) {
	for _, c := range []struct {
		kubelet, cp string
		ok          bool
	}{
		{"v1.35.4", "v1.35.3", true}, // a newer patch joins: kubeadm compares minors
		{"v1.35.3", "v1.35.4", true},
		{"v1.36.0", "v1.35.4", false},
		{"v1.32.0", "v1.35.4", true},
		{"v1.31.9", "v1.35.4", false},
	} {
		err := kubeletSkew(c.kubelet, c.cp)
		if (err == nil) != c.ok {
			t.Errorf("kubelet %s, control plane %s: %v, want ok %v", c.kubelet, c.cp, err, c.ok)
		}
	}
}
