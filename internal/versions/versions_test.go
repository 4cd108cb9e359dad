package versions

import (
	"strings"
	"testing"

	"github.com/labctl/labctl/embedded"
)

func TestEmbeddedPinsAreComplete(t *testing.T) {
	p, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	for _, pin := range p.List() {
		if strings.Contains(strings.ToLower(pin.Version), "latest") {
			t.Errorf("%s is %q: every version must be pinned", pin.Name, pin.Version)
		}
	}
	// The owner's pins from LAB.md.
	if p.CertManager != "v1.21.2" || p.ClusterAPIOperator != "v0.28.0" || !strings.HasPrefix(p.ClusterAPI, "v1.12.") || !strings.HasPrefix(p.CAPMOX, "v0.9.") {
		t.Errorf("owner's pins changed: %+v", p)
	}
	if !strings.HasPrefix(p.Kubernetes, "v1.35.") || !strings.HasPrefix(p.ClusterAutoscaler, "v1.35.") {
		t.Errorf("Kubernetes and the autoscaler are capped at 1.35 by CAPI 1.12: %s, %s", p.Kubernetes, p.ClusterAutoscaler)
	}
	if len(p.List()) == 0 || string(embedded.Versions) == "" {
		t.Fatal("no pins embedded")
	}
}

func TestParseRejectsMissingAndUnknownPins(t *testing.T) {
	if _, err := Parse([]byte("kubernetes: v1.35.4\n")); err == nil || !strings.Contains(err.Error(), "is not pinned") {
		t.Errorf("a missing pin was accepted: %v", err)
	}
	data := append([]byte("bogus: 1\n"), embedded.Versions...)
	if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("an unknown key was accepted: %v", err)
	}
}
