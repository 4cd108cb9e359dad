package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// TestDomainUUIDSurvivesAMove: clusterctl move recreates a LibvirtMachine
// with a new UID and the same spec; its domain is the one its providerID
// names, so the moved machine adopts it (and deletes it when scaled
// down). A machine without a providerID yet makes its domain with its UID.
func TestDomainUUIDSurvivesAMove(t *testing.T) {
	const domain = "0f0e5a52-5a1c-4c4e-9a3e-6d1f2b7c9e01"
	for _, tc := range []struct {
		name, providerID string
		uid              types.UID
		want             string
	}{
		{"new machine", "", domain, domain},
		{"moved machine", ProviderID("kvm1", domain), "6a1b2c3d-0000-4000-8000-000000000001", domain},
		{"same machine", ProviderID("kvm1", domain), domain, domain},
		{"not ours", "proxmox://" + domain, "6a1b2c3d-0000-4000-8000-000000000001", "6a1b2c3d-0000-4000-8000-000000000001"},
		{"no UUID", "libvirt://kvm1/", "6a1b2c3d-0000-4000-8000-000000000001", "6a1b2c3d-0000-4000-8000-000000000001"},
	} {
		lm := &v1alpha1.LibvirtMachine{ObjectMeta: metav1.ObjectMeta{UID: tc.uid}, Spec: v1alpha1.LibvirtMachineSpec{ProviderID: tc.providerID}}
		if got := domainUUID(lm); got != tc.want {
			t.Errorf("%s: domainUUID = %s, want %s", tc.name, got, tc.want)
		}
	}
}
