package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ClusterFinalizer holds a LibvirtCluster until its machines are gone.
const ClusterFinalizer = "infrastructure.labctl.dev/libvirtcluster"

// LibvirtClusterSpec is where a cluster's machines go: the libvirt hosts
// (each one a failure domain), the network their first NIC joins, and
// the IP pool their static addresses come from.
//
// +kubebuilder:validation:XValidation:rule="self.hosts.all(h, self.hosts.exists_one(o, o.name == h.name))",message="hosts[].name must be unique"
type LibvirtClusterSpec struct {
	// controlPlaneEndpoint is the API server's address (a kube-vip VIP);
	// labctl sets it when it renders the cluster.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// hosts are the KVM hosts machines are placed on; each is a failure
	// domain of its own name.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	Hosts []LibvirtHost `json:"hosts"`

	// network is what each machine's first NIC is attached to on its host.
	// +required
	Network NetworkSpec `json:"network"`

	// ipPool is the in-cluster IPAM pool (InClusterIPPool or
	// GlobalInClusterIPPool, group ipam.cluster.x-k8s.io) each machine
	// claims its address from, as CAPMOX does.
	// +required
	IPPool IPPoolReference `json:"ipPool"`

	// memoryAdjustment is the percentage of a host's memory machines may
	// reserve, as CAPMOX's schedulerHints.memoryAdjustment: 100 (the
	// default) never overcommits; 160 lets configured memory reach 160%
	// of the host's. Every defined domain counts with its configured
	// memory, stopped ones too.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MemoryAdjustment int32 `json:"memoryAdjustment,omitempty"`
}

// LibvirtHost is one KVM host.
type LibvirtHost struct {
	// name is the host's failure domain name; Machines name it in
	// spec.failureDomain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// uri is the libvirt URI of the host: qemu+ssh://user@host/system or
	// qemu+tls://host/system.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[a-z]+\+(ssh|tls)://`
	URI string `json:"uri"`

	// credentialsRef names a Secret in the LibvirtCluster's namespace:
	// for qemu+ssh, keys ssh-privatekey and known_hosts; for qemu+tls,
	// ca.crt, tls.crt and tls.key (the client certificate).
	// +required
	CredentialsRef SecretReference `json:"credentialsRef"`

	// controlPlane says whether control plane machines may go on this
	// host; default true.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`
}

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NetworkSpec is one of a host bridge or a libvirt network.
//
// +kubebuilder:validation:XValidation:rule="has(self.bridge) != has(self.network)",message="set exactly one of bridge and network"
type NetworkSpec struct {
	// bridge is a Linux bridge on every host (e.g. vmbr0).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Bridge string `json:"bridge,omitempty"`

	// network is a libvirt network defined on every host.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Network string `json:"network,omitempty"`

	// dnsServers go into each machine's network-config.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	DNSServers []string `json:"dnsServers,omitempty"`
}

// IPPoolReference names an in-cluster IPAM pool.
type IPPoolReference struct {
	// apiGroup of the pool; default ipam.cluster.x-k8s.io.
	// +optional
	// +kubebuilder:default=ipam.cluster.x-k8s.io
	APIGroup string `json:"apiGroup,omitempty"`
	// kind of the pool.
	// +required
	// +kubebuilder:validation:Enum=InClusterIPPool;GlobalInClusterIPPool
	Kind string `json:"kind"`
	// name of the pool (an InClusterIPPool is in the cluster's namespace).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// LibvirtClusterStatus is what the controller observed.
type LibvirtClusterStatus struct {
	// initialization says when the cluster's infrastructure is ready: true
	// once every host answered.
	// +optional
	Initialization ClusterInitialization `json:"initialization,omitempty,omitzero"`

	// failureDomains are the hosts.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// conditions: Ready, HostsReachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterInitialization is the contract's status.initialization.
// +kubebuilder:validation:MinProperties=1
type ClusterInitialization struct {
	// provisioned is true once every host answered.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// LibvirtCluster is a workload cluster's libvirt infrastructure.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=libvirtclusters,scope=Namespaced,categories=cluster-api,shortName=lvc
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
type LibvirtCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LibvirtClusterSpec   `json:"spec,omitempty"`
	Status LibvirtClusterStatus `json:"status,omitempty"`
}

// LibvirtClusterList is a list of LibvirtClusters.
//
// +kubebuilder:object:root=true
type LibvirtClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LibvirtCluster `json:"items"`
}

// LibvirtClusterTemplateSpec holds the LibvirtClusters' spec.
type LibvirtClusterTemplateSpec struct {
	// +required
	Template LibvirtClusterTemplateResource `json:"template"`
}

// LibvirtClusterTemplateResource is what each LibvirtCluster is made from.
type LibvirtClusterTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// +required
	Spec LibvirtClusterSpec `json:"spec"`
}

// LibvirtClusterTemplate is the infrastructure template of a ClusterClass
// whose clusters run on libvirt hosts (labctl's tenant ClusterClass for
// KVM workers): Cluster API's topology controller makes each Cluster's
// LibvirtCluster from it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=libvirtclustertemplates,scope=Namespaced,categories=cluster-api,shortName=lvct
// +kubebuilder:storageversion
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type LibvirtClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec LibvirtClusterTemplateSpec `json:"spec,omitempty"`
}

// LibvirtClusterTemplateList is a list of LibvirtClusterTemplates.
//
// +kubebuilder:object:root=true
type LibvirtClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LibvirtClusterTemplate `json:"items"`
}
