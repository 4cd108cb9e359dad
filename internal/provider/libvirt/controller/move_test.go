package controller

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
		{"moved machine", v1alpha1.ProviderID("kvm1", domain), "6a1b2c3d-0000-4000-8000-000000000001", domain},
		{"same machine", v1alpha1.ProviderID("kvm1", domain), domain, domain},
		{"not ours", "proxmox://" + domain, "6a1b2c3d-0000-4000-8000-000000000001", "6a1b2c3d-0000-4000-8000-000000000001"},
		{"no UUID", "libvirt://kvm1/", "6a1b2c3d-0000-4000-8000-000000000001", "6a1b2c3d-0000-4000-8000-000000000001"},
	} {
		lm := &v1alpha1.LibvirtMachine{ObjectMeta: metav1.ObjectMeta{UID: tc.uid}, Spec: v1alpha1.LibvirtMachineSpec{ProviderID: tc.providerID}}
		if got := domainUUID(lm); got != tc.want {
			t.Errorf("%s: domainUUID = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestClusterEventReachesPoolLibvirtClusters: a restore puts a pool's
// LibvirtCluster back before clusterctl recreates its Cluster; the
// LibvirtCluster's first reconcile finds no Cluster and waits. The
// Cluster's arrival (and its unpause) must reach that LibvirtCluster,
// which only the Cluster's label ties to it, as well as the one the
// Cluster references; another cluster's is left alone. (Found by the
// box's backup and restore check: the KVM pool's machine never became
// provisioned on the new management cluster.)
func TestClusterEventReachesPoolLibvirtClusters(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	lc := func(name, cluster string) *v1alpha1.LibvirtCluster {
		return &v1alpha1.LibvirtCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "lab1", Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}}}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(lc("lab1", "lab1"), lc("lab1-kvm", "lab1"), lc("lab2-kvm", "lab2")).Build()
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "lab1", Name: "lab1"},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: "LibvirtCluster", Name: "lab1"}}}
	var got []string
	for _, r := range clusterToLibvirtClusters(c)(t.Context(), cl) {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"lab1", "lab1-kvm"}) {
		t.Errorf("a Cluster event reaches LibvirtClusters %v, want lab1 (referenced) and lab1-kvm (its pool's)", got)
	}
	// A Cluster on Proxmox: only its pool's LibvirtCluster.
	cl.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "ProxmoxCluster", Name: "lab1"}
	got = nil
	for _, r := range clusterToLibvirtClusters(c)(t.Context(), cl) {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"lab1", "lab1-kvm"}) {
		t.Errorf("a Proxmox Cluster's event reaches LibvirtClusters %v, want its labelled lab1 and lab1-kvm", got)
	}
}
