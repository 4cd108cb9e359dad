package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// MachineFinalizer holds a LibvirtMachine (and so its Machine) until its
// domain, volumes and address claim are gone.
const MachineFinalizer = "infrastructure.labctl.dev/libvirtmachine"

// ClusterAnnotation on a LibvirtMachine names the LibvirtCluster whose
// hosts it goes on, in its namespace, when that is not the one the
// Cluster's infrastructureRef names: a pool on KVM hosts of a cluster
// whose infrastructure is a ProxmoxCluster (or another LibvirtCluster).
// A LibvirtMachineTemplate carries it in spec.template.metadata, which
// Cluster API copies onto each machine it makes.
const ClusterAnnotation = "infrastructure.labctl.dev/libvirt-cluster"

// LibvirtMachineSpec is one VM's size and disks.
type LibvirtMachineSpec struct {
	// providerID is libvirt://<host>/<domain uuid>; the controller sets it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// cpus is the number of vCPUs.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	CPUs int32 `json:"cpus"`

	// memoryMiB is the memory in MiB.
	// +required
	// +kubebuilder:validation:Minimum=256
	MemoryMiB int32 `json:"memoryMiB"`

	// diskGiB is the root disk's size: a qcow2 overlay on the image.
	// +required
	// +kubebuilder:validation:Minimum=1
	DiskGiB int32 `json:"diskGiB"`

	// image is the node image volume every host holds (labctl image
	// build puts it there); the root disk and the cloud-init seed go in
	// its pool.
	// +required
	Image ImageVolume `json:"image"`

	// extraDisks are empty qcow2 disks after the root disk (vdb, vdc, ...).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	ExtraDisks []ExtraDisk `json:"extraDisks,omitempty"`
}

// ImageVolume is a volume in a storage pool.
type ImageVolume struct {
	// pool is the storage pool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// volume is the volume's name in the pool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Volume string `json:"volume"`
}

// ExtraDisk is an empty data disk.
type ExtraDisk struct {
	// sizeGiB is the disk's size.
	// +required
	// +kubebuilder:validation:Minimum=1
	SizeGiB int32 `json:"sizeGiB"`
}

// LibvirtMachineStatus is what the controller observed.
type LibvirtMachineStatus struct {
	// initialization: provisioned is true once the domain runs.
	// +optional
	Initialization MachineInitialization `json:"initialization,omitempty,omitzero"`

	// addresses are the machine's static address and hostname.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureDomain is the host the machine was placed on.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// conditions: Ready, VirtualMachineProvisioned.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MachineInitialization is the contract's status.initialization.
// +kubebuilder:validation:MinProperties=1
type MachineInitialization struct {
	// provisioned is true once the domain is defined and started.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// LibvirtMachine is one VM on a libvirt host.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=libvirtmachines,scope=Namespaced,categories=cluster-api,shortName=lvm
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.failureDomain"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
type LibvirtMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LibvirtMachineSpec   `json:"spec,omitempty"`
	Status LibvirtMachineStatus `json:"status,omitempty"`
}

// LibvirtMachineList is a list of LibvirtMachines.
//
// +kubebuilder:object:root=true
type LibvirtMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LibvirtMachine `json:"items"`
}

// LibvirtMachineTemplateSpec holds the machines' spec.
type LibvirtMachineTemplateSpec struct {
	// +required
	Template LibvirtMachineTemplateResource `json:"template"`
}

// LibvirtMachineTemplateResource is what each machine is made from.
type LibvirtMachineTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// +required
	Spec LibvirtMachineSpec `json:"spec"`
}

// LibvirtMachineTemplateStatus publishes the machines' size for the
// cluster-autoscaler's scale from zero (Cluster API's opt-in autoscaling
// from zero; cluster-autoscaler 1.35's clusterapi provider reads
// status.capacity and status.nodeInfo of the infrastructure template).
type LibvirtMachineTemplateStatus struct {
	// capacity is cpu, memory and ephemeral-storage of one machine.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// nodeInfo is the machines' OS and architecture.
	// +optional
	NodeInfo NodeInfo `json:"nodeInfo,omitempty,omitzero"`
}

// NodeInfo is a node's operating system and architecture.
// +kubebuilder:validation:MinProperties=1
type NodeInfo struct {
	// architecture is the CPU architecture, e.g. amd64.
	// +optional
	// +kubebuilder:validation:Enum=amd64;arm64;s390x;ppc64le
	Architecture string `json:"architecture,omitempty"`
	// operatingSystem is e.g. linux.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// LibvirtMachineTemplate is the template of a MachineDeployment's machines.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=libvirtmachinetemplates,scope=Namespaced,categories=cluster-api,shortName=lvmt
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type LibvirtMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LibvirtMachineTemplateSpec   `json:"spec,omitempty"`
	Status LibvirtMachineTemplateStatus `json:"status,omitempty"`
}

// LibvirtMachineTemplateList is a list of LibvirtMachineTemplates.
//
// +kubebuilder:object:root=true
type LibvirtMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LibvirtMachineTemplate `json:"items"`
}
