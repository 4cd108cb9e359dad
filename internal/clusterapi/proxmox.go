package clusterapi

import "k8s.io/apimachinery/pkg/runtime/schema"

// CAPMOX is not served as a Go module, so these are the few fields of its
// v1alpha2 API (the storage version of CAPMOX v0.9) that labctl writes,
// with the CRD's JSON names. The real CRD validates them in the tests.

var infraGV = schema.GroupVersion{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha2"}

type proxmoxCluster struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Metadata   objectMeta         `json:"metadata"`
	Spec       proxmoxClusterSpec `json:"spec"`
}

type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type proxmoxClusterSpec struct {
	ControlPlaneEndpoint apiEndpoint    `json:"controlPlaneEndpoint"`
	IPv4Config           ipConfig       `json:"ipv4Config"`
	DNSServers           []string       `json:"dnsServers"`
	AllowedNodes         []string       `json:"allowedNodes,omitempty"`
	SchedulerHints       schedulerHints `json:"schedulerHints"`
}

type apiEndpoint struct {
	Host string `json:"host"`
	Port int32  `json:"port"`
}

type ipConfig struct {
	Addresses []string `json:"addresses"`
	Gateway   string   `json:"gateway"`
	Prefix    int32    `json:"prefix"`
}

type schedulerHints struct {
	// MemoryAdjustment is in percent: 160 lets CAPMOX place VMs worth 1.6×
	// a node's memory.
	MemoryAdjustment int64 `json:"memoryAdjustment"`
}

type proxmoxMachineTemplate struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Metadata   objectMeta                 `json:"metadata"`
	Spec       proxmoxMachineTemplateSpec `json:"spec"`
}

type proxmoxMachineTemplateSpec struct {
	Template struct {
		Spec proxmoxMachineSpec `json:"spec"`
	} `json:"template"`
}

type proxmoxMachineSpec struct {
	SourceNode       string            `json:"sourceNode,omitempty"`
	TemplateID       *int32            `json:"templateID,omitempty"`
	TemplateSelector *templateSelector `json:"templateSelector,omitempty"`
	AllowedNodes     []string          `json:"allowedNodes,omitempty"`
	Full             bool              `json:"full"`
	Storage          string            `json:"storage,omitempty"`
	NumSockets       int32             `json:"numSockets"`
	NumCores         int32             `json:"numCores"`
	MemoryMiB        int32             `json:"memoryMiB"`
	Disks            disks             `json:"disks"`
	Network          network           `json:"network"`
	// VMIDRange keeps the machines' VM ids in the lab's vmidRange: without
	// it CAPMOX takes /cluster/nextid, the lowest free id (measured: 100
	// for lab1's first machine against the lab's 200-299).
	VMIDRange *vmIDRange `json:"vmIDRange,omitempty"`
}

type vmIDRange struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

type templateSelector struct {
	MatchTags []string `json:"matchTags"`
}

type disks struct {
	BootVolume struct {
		Disk   string `json:"disk"`
		SizeGB int32  `json:"sizeGb"`
	} `json:"bootVolume"`
}

type network struct {
	NetworkDevices []networkDevice `json:"networkDevices"`
}

type networkDevice struct {
	Name        string `json:"name"`
	Bridge      string `json:"bridge"`
	Model       string `json:"model"`
	VLAN        int32  `json:"vlan,omitempty"`
	DefaultIPv4 bool   `json:"defaultIPv4"`
}
