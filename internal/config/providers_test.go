package config_test

import (
	"context"
	"testing"

	"github.com/labctl/labctl/internal/config"
)

// TestProvidersFollowTheClusters: the optional providers 'mgmt install'
// installs are those the stack enables and those the clusters need, so a
// lab that validates has every provider its clusters call for.
func TestProvidersFollowTheClusters(t *testing.T) {
	for _, tc := range []struct {
		path string
		want config.OptionalProviders
	}{
		{labExample, config.OptionalProviders{}},
		// The KVM pool needs labctl's libvirt provider; the file does not enable it.
		{"../../examples/lab-mixed.yaml", config.OptionalProviders{Libvirt: true}},
		{"../../examples/lab-tenants.yaml", config.OptionalProviders{Libvirt: true, Kamaji: true, ClusterTopology: true}},
		{"testdata/valid/management-stack-libvirt.yaml", config.OptionalProviders{Libvirt: true}},
	} {
		lab, _, err := config.Load(context.Background(), config.Request{Path: tc.path, Explicit: true})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if got := lab.Providers(); got != tc.want {
			t.Errorf("%s: Providers() = %+v, want %+v", tc.path, got, tc.want)
		}
	}
	// The explicit switches still count on their own.
	lab, _, err := config.Load(context.Background(), config.Request{Path: labExample, Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.Stack.Kamaji.Enabled = true
	lab.Management.Stack.ClusterClass = true
	if got := lab.Providers(); !got.Kamaji || !got.ClusterTopology || got.Libvirt {
		t.Errorf("with kamaji.enabled and clusterClass: Providers() = %+v", got)
	}
}
