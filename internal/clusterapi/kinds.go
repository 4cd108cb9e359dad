package clusterapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	libvirtv1 "github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// The Cluster API kinds labctl renders and reads, at the versions of the
// pinned providers: the one place they are spelled. The CAPI ones come from
// the upstream Go types' GroupVersion, so a version bump is one import.
var (
	ClusterGVK               = clusterv1.GroupVersion.WithKind("Cluster")
	MachineDeploymentGVK     = clusterv1.GroupVersion.WithKind("MachineDeployment")
	MachineSetGVK            = clusterv1.GroupVersion.WithKind("MachineSet")
	MachineGVK               = clusterv1.GroupVersion.WithKind("Machine")
	KubeadmControlPlaneGVK   = controlplanev1.GroupVersion.WithKind("KubeadmControlPlane")
	KubeadmConfigTemplateGVK = bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplate")
	// CAPMOX v1alpha2 (its Go module is not imported: see proxmox.go).
	ProxmoxClusterGVK         = infraGV.WithKind("ProxmoxCluster")
	ProxmoxMachineTemplateGVK = infraGV.WithKind("ProxmoxMachineTemplate")
	// ProxmoxMachine's spec.virtualMachineID is the VMID of its VM.
	ProxmoxMachineGVK = infraGV.WithKind("ProxmoxMachine")
	// labctl's own libvirt provider.
	LibvirtClusterGVK         = libvirtv1.GroupVersion.WithKind("LibvirtCluster")
	LibvirtMachineTemplateGVK = libvirtv1.GroupVersion.WithKind("LibvirtMachineTemplate")
	// A LibvirtMachine's UID is its domain's UUID.
	LibvirtMachineGVK = libvirtv1.GroupVersion.WithKind("LibvirtMachine")
	// In-cluster IPAM v1.0.3's storage version: a libvirt cluster's node
	// addresses (CAPMOX makes its own pool).
	InClusterIPPoolGVK = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1alpha2", Kind: "InClusterIPPool"}
)

// Resources of the CAPI kinds, for dynamic clients and informers.
var (
	MachineDeploymentResource = clusterv1.GroupVersion.WithResource("machinedeployments")
	MachineSetResource        = clusterv1.GroupVersion.WithResource("machinesets")
	MachineResource           = clusterv1.GroupVersion.WithResource("machines")
)

// Labels CAPI puts on the objects of a cluster.
const (
	ClusterNameLabel    = clusterv1.ClusterNameLabel
	DeploymentNameLabel = clusterv1.MachineDeploymentNameLabel
	// TopologyPoolLabel names the topology pool a MachineDeployment of a
	// ClusterClass cluster (a tenant) was made for; the topology
	// controller adds a random suffix to the MachineDeployment's name.
	TopologyPoolLabel = clusterv1.ClusterTopologyMachineDeploymentNameLabel
)

// PoolMachineDeploymentName is the MachineDeployment of a cluster's pool.
func PoolMachineDeploymentName(cluster, pool string) string { return cluster + "-" + pool }

func typeMeta(gvk schema.GroupVersionKind) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
}
