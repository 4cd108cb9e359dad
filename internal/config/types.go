// Package config holds the lab.yaml API (labctl.dev/v1alpha1, kind Lab):
// its types, loading with strict decoding, defaulting and validation.
package config

// APIVersion and Kind identify a lab.yaml document.
const (
	APIVersion = "labctl.dev/v1alpha1"
	Kind       = "Lab"
)

// Lab is the model of a lab: hypervisors, network, the management VM,
// node images, workload clusters and scale-test settings, in one form
// each and with the defaults filled in. lab.yaml is read as a File and
// converted (v1alpha1.go); every command reads this.
type Lab struct {
	APIVersion  string
	Kind        string
	Metadata    Metadata
	Hypervisors []Hypervisor
	Network     Network
	Management  Management
	Images      []Image
	Clusters    []Cluster
	ScaleTest   ScaleTest
}

// Metadata names the lab. The name keys its state folder and VM tags.
type Metadata struct {
	Name string `yaml:"name" json:"name"`
}

// Hypervisor is one Proxmox VE endpoint or one libvirt host. Exactly one of
// Proxmox and Libvirt is set.
type Hypervisor struct {
	Name    string   `yaml:"name" json:"name"`
	Proxmox *Proxmox `yaml:"proxmox,omitempty" json:"proxmox,omitempty"`
	Libvirt *Libvirt `yaml:"libvirt,omitempty" json:"libvirt,omitempty"`
}

// Proxmox is a Proxmox VE API endpoint reached with an API token.
type Proxmox struct {
	// URL of the API, e.g. https://192.168.0.8:8006.
	URL string `yaml:"url" json:"url"`
	// TokenID is user@realm!tokenname.
	TokenID string `yaml:"tokenID" json:"tokenID"`
	// TokenSecret names where the token secret is kept; never the secret itself.
	TokenSecret SecretRef `yaml:"tokenSecret" json:"tokenSecret"`
	TLS         TLS       `yaml:"tls,omitempty" json:"tls,omitempty"`
	Nodes       []PVENode `yaml:"nodes" json:"nodes"`
	// VMIDRange is where labctl picks free VM ids when a VM has none set.
	VMIDRange *VMIDRange `yaml:"vmidRange,omitempty" json:"vmidRange,omitempty"`
}

// TLS says how to trust the Proxmox certificate. With none of the fields set
// the system roots are used.
type TLS struct {
	CAFile string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	// Fingerprint is the SHA-256 of the server certificate, hex with colons.
	Fingerprint        string `yaml:"fingerprint,omitempty" json:"fingerprint,omitempty"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify,omitempty" json:"insecureSkipVerify,omitempty"`
}

// PVENode is one node of a Proxmox cluster and where VMs go on it.
type PVENode struct {
	Name string `yaml:"name" json:"name"`
	// Storage holds VM disks and cloud-init drives, e.g. local-lvm.
	Storage string `yaml:"storage" json:"storage"`
	// ImageStorage receives downloaded cloud images (content import) and
	// NoCloud ISOs (content iso), e.g. local.
	ImageStorage string `yaml:"imageStorage" json:"imageStorage"`
	Bridge       string `yaml:"bridge" json:"bridge"`
}

// VMIDRange is an inclusive range of Proxmox VM ids.
type VMIDRange struct {
	Start int `yaml:"start" json:"start"`
	End   int `yaml:"end" json:"end"`
}

// Libvirt is a KVM host reached through a libvirt URI.
type Libvirt struct {
	// URI is qemu:///system, qemu+ssh://user@host/system or qemu+tls://host/system.
	URI         string `yaml:"uri" json:"uri"`
	StoragePool string `yaml:"storagePool" json:"storagePool"`
	// Network is a libvirt network name; Bridge a host bridge. One is set.
	Network string `yaml:"network,omitempty" json:"network,omitempty"`
	Bridge  string `yaml:"bridge,omitempty" json:"bridge,omitempty"`
	// DomainType is kvm or qemu; empty picks kvm when the host offers it.
	DomainType string `yaml:"domainType,omitempty" json:"domainType,omitempty"`
	// SSHKeyFile is the private key for a qemu+ssh URI, offered after the
	// keys in ssh-agent; empty means ~/.ssh/id_ed25519, id_ecdsa or id_rsa.
	SSHKeyFile string `yaml:"sshKeyFile,omitempty" json:"sshKeyFile,omitempty"`
	// KnownHostsFile holds the host keys to trust for a qemu+ssh URI;
	// empty means ~/.ssh/known_hosts. Only 'cluster create' reads it: the
	// libvirt provider in the management cluster gets it in the host's
	// credentials Secret (labctl on this machine checks ssh's own files).
	KnownHostsFile string `yaml:"knownHostsFile,omitempty" json:"knownHostsFile,omitempty"`
	// TLS names the CA and client certificate for a qemu+tls URI; empty
	// fields mean libvirt's usual paths.
	TLS *LibvirtTLS `yaml:"tls,omitempty" json:"tls,omitempty"`
}

// LibvirtTLS names PEM files for libvirt's TLS transport.
type LibvirtTLS struct {
	CAFile   string `yaml:"caFile,omitempty" json:"caFile,omitempty"`
	CertFile string `yaml:"certFile,omitempty" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile,omitempty" json:"keyFile,omitempty"`
}

// SecretRef points at a secret kept outside lab.yaml. Exactly one is set.
type SecretRef struct {
	Env  string `yaml:"env,omitempty" json:"env,omitempty"`
	File string `yaml:"file,omitempty" json:"file,omitempty"`
}

// Network is the lab's VM network.
type Network struct {
	// CIDR is the VM subnet, e.g. 192.168.4.0/24.
	CIDR    string   `yaml:"cidr" json:"cidr"`
	Gateway string   `yaml:"gateway" json:"gateway"`
	VLAN    int      `yaml:"vlan,omitempty" json:"vlan,omitempty"`
	DNS     []string `yaml:"dns" json:"dns"`
}

// Management is the k3s VM that runs Cluster API and the autoscalers
// (FileManagement documents the fields).
type Management struct {
	Hypervisor       string
	Node             string
	Name             string
	VMID             int
	IP               string
	Size             Size
	K3sVersion       string
	Image            CloudImage
	User             string
	SSHPublicKeys    []string
	SSHPublicKeyFile string
	Stack            Stack
}

// Stack is the management stack: cert-manager, cluster-api-operator, the
// Cluster API providers and the cluster-autoscaler RBAC. The core providers
// are always installed (CAPMOX where a Proxmox hypervisor is listed); these
// fields add the optional ones and say where things come from.
type Stack struct {
	// OfflineDir is an air-gapped install's source: chart .tgz files and
	// provider components in clusterctl's layout. Empty fetches them online.
	OfflineDir string `yaml:"offlineDir,omitempty" json:"offlineDir,omitempty"`
	// ClusterClass turns on Cluster API's ClusterTopology feature gate.
	ClusterClass bool `yaml:"clusterClass,omitempty" json:"clusterClass,omitempty"`
	// ChartRepos replaces the pinned chart repositories, e.g. with a mirror;
	// the chart versions stay pinned.
	ChartRepos ChartRepos `yaml:"chartRepos,omitempty" json:"chartRepos,omitempty"`
	// Libvirt adds labctl's own infrastructure provider for libvirt hosts
	// (phase 2). It comes from the labctl binary itself, so there is no
	// URL to name.
	Libvirt LibvirtProvider `yaml:"libvirt,omitempty" json:"libvirt,omitempty"`
	// Kamaji adds the Kamaji control plane provider (phase 3).
	Kamaji OptionalProvider `yaml:"kamaji,omitempty" json:"kamaji,omitempty"`
}

// ChartRepos are Helm chart repository URLs by chart.
type ChartRepos struct {
	CertManager        string `yaml:"certManager,omitempty" json:"certManager,omitempty"`
	ClusterAPIOperator string `yaml:"clusterAPIOperator,omitempty" json:"clusterAPIOperator,omitempty"`
	// Cilium is where 'cluster create' fetches the Cilium chart from.
	Cilium string `yaml:"cilium,omitempty" json:"cilium,omitempty"`
}

// LibvirtProvider switches on labctl's own libvirt provider.
type LibvirtProvider struct {
	Enabled bool `yaml:"enabled,omitempty" json:"enabled,omitempty"`
}

// OptionalProvider switches on an upstream Cluster API provider that not
// every lab needs.
type OptionalProvider struct {
	Enabled bool `yaml:"enabled,omitempty" json:"enabled,omitempty"`
	// FetchURL is where cluster-api-operator fetches the provider's
	// releases, https://github.com/<owner>/<repo>/releases. Empty uses the
	// operator's built-in provider list.
	FetchURL string `yaml:"fetchURL,omitempty" json:"fetchURL,omitempty"`
}

// CloudImage is a cloud image and how to verify it. One of Checksum and
// ChecksumURL is set.
type CloudImage struct {
	URL string `yaml:"url" json:"url"`
	// Checksum is sha256:<64 hex>.
	Checksum string `yaml:"checksum,omitempty" json:"checksum,omitempty"`
	// ChecksumURL is a SHA256SUMS file listing the image.
	ChecksumURL string `yaml:"checksumURL,omitempty" json:"checksumURL,omitempty"`
}

// Size is a VM's CPU, memory and disk. Memory and disk are quantities (2Gi).
type Size struct {
	CPUs   int
	Memory string
	Disk   string
}

// Image is a node VM template built by image-builder.
type Image struct {
	Name              string `yaml:"name" json:"name"`
	Hypervisor        string `yaml:"hypervisor" json:"hypervisor"`
	Node              string `yaml:"node,omitempty" json:"node,omitempty"`
	OS                string `yaml:"os" json:"os"`
	KubernetesVersion string `yaml:"kubernetesVersion" json:"kubernetesVersion"`
	// VMID pins the template's VM id; 0 lets Packer pick.
	VMID int `yaml:"vmid,omitempty" json:"vmid,omitempty"`
	// ImageBuilder is a kubernetes-sigs/image-builder checkout at the
	// pinned tag (its root or images/capi); --image-builder overrides it.
	ImageBuilder string `yaml:"imageBuilder,omitempty" json:"imageBuilder,omitempty"`
	// Hosts are the libvirt hypervisors whose storage pools receive the
	// image's qcow2 (libvirt images only); empty means every libvirt
	// hypervisor of the lab.
	Hosts []string `yaml:"hosts,omitempty" json:"hosts,omitempty"`
}

// VolumeName is the storage volume 'image build' uploads a libvirt
// image as, and that a LibvirtMachineTemplate's image.volume names:
// "<name>-<kubernetesVersion>.qcow2".
func (img Image) VolumeName() string { return img.Name + "-" + img.KubernetesVersion + ".qcow2" }

// TemplateTags are the Proxmox tags 'image build' puts on the template it
// makes, and that clusters find it by (CAPMOX templateSelector, exact match).
func (img Image) TemplateTags() []string {
	return []string{"labctl", "labctl-image-" + img.Name, "kubernetes-" + img.KubernetesVersion}
}

// Cluster is a workload cluster made of Cluster API objects
// (FileCluster documents the fields). Its workers are Pools only: the
// file's workers is the pool named workers.
type Cluster struct {
	Name              string
	Hypervisor        string
	AllowedNodes      []string
	KubernetesVersion string
	ControlPlane      ControlPlane
	Pools             []Pool
	NodeIPRange       string
	PodCIDR           string
	ServiceCIDR       string
	MemoryAdjustment  int
	Template          Template
	CNI               CNI
	Autoscaler        Autoscaler

	// workersForm is true when the file wrote the one pool as workers:
	// errors name clusters[].workers, and config view writes it back so.
	workersForm bool
}

// Autoscaler is the per-cluster cluster-autoscaler's timing: the owner's
// aggressive scale-down profile by default. Durations are Go durations.
type Autoscaler struct {
	ScanInterval              string `yaml:"scanInterval" json:"scanInterval"`
	ScaleDownUnneededTime     string `yaml:"scaleDownUnneededTime" json:"scaleDownUnneededTime"`
	ScaleDownDelayAfterAdd    string `yaml:"scaleDownDelayAfterAdd" json:"scaleDownDelayAfterAdd"`
	ScaleDownDelayAfterDelete string `yaml:"scaleDownDelayAfterDelete" json:"scaleDownDelayAfterDelete"`
	// ScaleDownUtilizationThreshold is a fraction, e.g. "0.7": nodes below
	// it are candidates for removal.
	ScaleDownUtilizationThreshold string `yaml:"scaleDownUtilizationThreshold" json:"scaleDownUtilizationThreshold"`
	MaxNodeProvisionTime          string `yaml:"maxNodeProvisionTime" json:"maxNodeProvisionTime"`
}

// Control plane providers a cluster may choose.
const (
	// ControlPlaneKubeadm is the default: control-plane VMs made by
	// KubeadmControlPlane, reached at a kube-vip VIP.
	ControlPlaneKubeadm = "kubeadm"
	// ControlPlaneKamaji is a hosted control plane: Kamaji runs it as pods
	// in the management cluster, reached at management.ip:port. Such a
	// cluster is a tenant (docs/tenants.md).
	ControlPlaneKamaji = "kamaji"
)

// ControlPlane is the cluster's control plane: kubeadm's VMs with a
// kube-vip VIP (the default), or a Kamaji hosted control plane
// (FileControlPlane documents the fields).
type ControlPlane struct {
	Provider string
	Endpoint string
	Port     int
	Replicas int
	Size     Size
}

// Kamaji reports whether the cluster's control plane is Kamaji's: the
// cluster is a tenant.
func (c *Cluster) Kamaji() bool { return c.ControlPlane.Provider == ControlPlaneKamaji }

// DefaultPool is the name of the pool clusters[].workers describes.
const DefaultPool = "workers"

// Pool is one worker pool: a MachineDeployment autoscaled between Min and
// Max (a fixed Min workers when Max <= Min) on its hypervisors, the
// cluster's when the file names none (FilePool documents the fields).
type Pool struct {
	Name        string
	Hypervisors []string
	Min         int
	Max         int
	Size        Size
	Labels      []string
	Taints      []string
	// Template is the pool's node image when it differs from the
	// cluster's.
	Template *Template
}

// Autoscaled reports whether the cluster-autoscaler owns the pool's count.
func (p Pool) Autoscaled() bool { return Autoscaled(p.Min, p.Max) }

// PoolTemplate is the node image of pool p: its own, else the cluster's.
func (c *Cluster) PoolTemplate(p Pool) Template {
	if p.Template != nil {
		return *p.Template
	}
	return c.Template
}

// Template says which VM template the nodes clone. On Proxmox either
// Image (found by the tags image build sets) or SourceNode with
// TemplateID; on libvirt hosts Volume.
type Template struct {
	Image      string `yaml:"image,omitempty" json:"image,omitempty"`
	SourceNode string `yaml:"sourceNode,omitempty" json:"sourceNode,omitempty"`
	TemplateID int    `yaml:"templateID,omitempty" json:"templateID,omitempty"`
	// Volume is the node image volume in each libvirt host's storagePool,
	// e.g. ubuntu-2404-kube-v1.35.4.qcow2: the root disks are overlays on it.
	Volume string `yaml:"volume,omitempty" json:"volume,omitempty"`
}

// CNI is the cluster's network plugin, installed by Helm.
type CNI struct {
	// Cilium is the chart version; empty takes the pinned one.
	Cilium string `yaml:"cilium" json:"cilium"`
}

// ScaleTest configures labctl scale-test.
type ScaleTest struct {
	Workload ScaleWorkload `yaml:"workload" json:"workload"`
	Timeouts ScaleTimeouts `yaml:"timeouts" json:"timeouts"`
}

// ScaleWorkload is the inflate Deployment: pause pods with these requests.
type ScaleWorkload struct {
	Image  string `yaml:"image" json:"image"`
	CPU    string `yaml:"cpu" json:"cpu"`
	Memory string `yaml:"memory" json:"memory"`
}

// ScaleTimeouts bound each scale-test phase; Go durations such as 15m.
type ScaleTimeouts struct {
	ScaleUp   string `yaml:"scaleUp" json:"scaleUp"`
	ScaleDown string `yaml:"scaleDown" json:"scaleDown"`
	FromZero  string `yaml:"fromZero" json:"fromZero"`
}
