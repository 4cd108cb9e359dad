// Package v1alpha1 is the API of labctl's Cluster API infrastructure
// provider for libvirt hosts: LibvirtCluster, LibvirtMachine and
// LibvirtMachineTemplate in group infrastructure.labctl.dev, on Cluster
// API contract v1beta2 (sigs.k8s.io/cluster-api v1.12,
// docs/book/src/developer/providers/contracts/infra-cluster.md and
// infra-machine.md). The CRDs are generated from these types by
// controller-gen (make generate) into embedded/provider/libvirt/crds.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.labctl.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "infrastructure.labctl.dev", Version: "v1alpha1"}

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&LibvirtCluster{}, &LibvirtClusterList{},
		&LibvirtClusterTemplate{}, &LibvirtClusterTemplateList{},
		&LibvirtMachine{}, &LibvirtMachineList{},
		&LibvirtMachineTemplate{}, &LibvirtMachineTemplateList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
