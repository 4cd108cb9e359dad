package mgmt

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
)

// The version rules of the plan, one per line of docs/upgrades.md.
func TestRefuseOlderTarget(t *testing.T) {
	for _, c := range []struct {
		from, to string
		oneMinor bool
		want     string // a part of the refusal; "" is allowed
	}{
		{"v1.12.10", "v1.12.11", false, ""},
		{"v1.13.0", "v1.12.11", false, "newer than v1.12.11 that this labctl pins: labctl does not downgrade"},
		{"v1.35.4+k3s2", "v1.35.4+k3s1", true, "labctl does not downgrade"},
		{"v1.35.4+k3s1", "v1.35.4+k3s2", true, ""},
		{"v1.34.2+k3s1", "v1.35.4+k3s1", true, ""},
		{"v1.33.2+k3s1", "v1.35.4+k3s1", true, "skips 1 minor versions, and k3s upgrades one minor at a time; upgrade with a labctl that pins v1.34 first"},
		{"v1.19.0", "v1.21.2", true, "skips 1 minor"},
		{"0.27.0", "0.28.0", false, ""},
		{"0.26.0", "0.28.0", false, ""},
	} {
		name := "k3s"
		if !strings.Contains(c.from, "k3s") {
			name = "cert-manager"
		}
		got := refuseOlderTarget(UpgradeItem{Component: name, From: c.from, To: c.to, Action: ActionUpgrade}, c.oneMinor)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s → %s: %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

// metadataComponent is a provider component whose offline ConfigMap
// carries metadata.
func metadataComponent(version, metadata string) *components.Component {
	cm := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "data": map[string]any{"metadata": metadata}}}
	return &components.Component{Name: "InfrastructureProvider x", Version: version, Objects: []*unstructured.Unstructured{cm}}
}

// The target contract comes from the release's metadata.yaml, read as
// clusterctl reads it; a version it has no release series for is refused.
func TestTargetContract(t *testing.T) {
	meta, err := release.Metadata("v0.3.1")
	if err != nil {
		t.Fatal(err)
	}
	if c, from, err := targetContract(metadataComponent("v0.3.1", string(meta))); c != "v1beta2" || from != "metadata.yaml" || err != nil {
		t.Errorf("labctl's own provider: %s from %s, %v", c, from, err)
	}
	old := "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 4\n  contract: v1alpha4\n"
	if c, _, err := targetContract(metadataComponent("v0.4.2", old)); c != "v1alpha4" || err != nil {
		t.Errorf("an old release: %s, %v", c, err)
	}
	if _, _, err := targetContract(metadataComponent("v0.5.0", old)); err == nil || !strings.Contains(err.Error(), "has no release series v0.5") {
		t.Errorf("a version without a release series: %v", err)
	}
	if c, from, err := targetContract(&components.Component{Name: "CoreProvider cluster-api", Version: "v1.12.11"}); c != "v1beta2" || !strings.Contains(from, "Cluster API types") || err != nil {
		t.Errorf("an online provider: %s from %s, %v", c, from, err)
	}
	for c, want := range map[string]string{"v1beta2": "v1beta2 v1beta1", "v1beta1": "v1beta1"} {
		if got := strings.Join(compatibleContracts(c), " "); got != want {
			t.Errorf("compatible with %s: %s, want %s", c, got, want)
		}
	}
}
