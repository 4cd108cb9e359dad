package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// File is lab.yaml as written: the labctl.dev/v1alpha1 Lab document, as
// kind keeps its file format (pkg/apis/config/v1alpha4) apart from the
// model its commands read (pkg/internal/apis/config). It keeps the
// file's forms (a cluster's one pool as workers, or its pools) and says
// what is left out with a nil pointer. Parse decodes a File, converts it
// into a Lab, fills in the defaults and validates; FileOf turns a Lab
// back into a File for config view.
//
// Only the types that differ from the model are File types here; the
// others (Hypervisor, Network, Image, ...) are the file format and the
// model alike.
type File struct {
	APIVersion  string         `yaml:"apiVersion" json:"apiVersion"`
	Kind        string         `yaml:"kind" json:"kind"`
	Metadata    Metadata       `yaml:"metadata" json:"metadata"`
	Hypervisors []Hypervisor   `yaml:"hypervisors" json:"hypervisors"`
	Network     Network        `yaml:"network" json:"network"`
	Management  FileManagement `yaml:"management" json:"management"`
	Images      []Image        `yaml:"images,omitempty" json:"images,omitempty"`
	Clusters    []FileCluster  `yaml:"clusters,omitempty" json:"clusters,omitempty"`
	ScaleTest   ScaleTest      `yaml:"scaleTest" json:"scaleTest"`
}

// FileManagement is management: the k3s VM that runs Cluster API and the
// autoscalers.
type FileManagement struct {
	Hypervisor string `yaml:"hypervisor" json:"hypervisor"`
	// Node is the Proxmox node; empty for libvirt.
	Node string `yaml:"node,omitempty" json:"node,omitempty"`
	Name string `yaml:"name" json:"name"`
	// VMID is the Proxmox VM id; 0 picks a free one in the hypervisor's vmidRange.
	VMID int `yaml:"vmid,omitempty" json:"vmid,omitempty"`
	// IP is a static address in network.cidr; empty means DHCP (libvirt only).
	IP         string     `yaml:"ip,omitempty" json:"ip,omitempty"`
	Size       FileSize   `yaml:"size" json:"size"`
	K3sVersion string     `yaml:"k3sVersion" json:"k3sVersion"`
	Image      CloudImage `yaml:"image" json:"image"`
	User       string     `yaml:"user" json:"user"`
	// SSHPublicKeys are inline public keys; SSHPublicKeyFile a path to one.
	SSHPublicKeys    []string `yaml:"sshPublicKeys,omitempty" json:"sshPublicKeys,omitempty"`
	SSHPublicKeyFile string   `yaml:"sshPublicKeyFile,omitempty" json:"sshPublicKeyFile,omitempty"`
	// Stack tunes what 'labctl mgmt install' puts on the cluster.
	Stack Stack `yaml:"stack,omitempty" json:"stack,omitempty"`
}

// FileSize is a VM's CPU, memory and disk. Memory and disk are quantities
// (2Gi). CPUs left out takes the default; a written 0 is refused.
type FileSize struct {
	CPUs   *int   `yaml:"cpus" json:"cpus"`
	Memory string `yaml:"memory" json:"memory"`
	Disk   string `yaml:"disk" json:"disk"`
}

// FileCluster is a workload cluster made of Cluster API objects.
type FileCluster struct {
	Name              string           `yaml:"name" json:"name"`
	Hypervisor        string           `yaml:"hypervisor" json:"hypervisor"`
	AllowedNodes      []string         `yaml:"allowedNodes,omitempty" json:"allowedNodes,omitempty"`
	KubernetesVersion string           `yaml:"kubernetesVersion" json:"kubernetesVersion"`
	ControlPlane      FileControlPlane `yaml:"controlPlane" json:"controlPlane"`
	// Workers is the one worker pool of a cluster, on its hypervisor: the
	// pool named workers. Set either workers or pools.
	Workers FileWorkers `yaml:"workers,omitempty" json:"workers,omitzero"`
	// Pools are worker pools, each on hypervisors of its own: Proxmox
	// (the cluster's) or libvirt hosts. Set either workers or pools.
	Pools []FilePool `yaml:"pools,omitempty" json:"pools,omitempty"`
	// NodeIPRange is first-last, e.g. 192.168.4.40-192.168.4.59, inside network.cidr.
	NodeIPRange string `yaml:"nodeIPRange" json:"nodeIPRange"`
	PodCIDR     string `yaml:"podCIDR" json:"podCIDR"`
	ServiceCIDR string `yaml:"serviceCIDR" json:"serviceCIDR"`
	// MemoryAdjustment is CAPMOX schedulerHints.memoryAdjustment in percent.
	MemoryAdjustment *int     `yaml:"memoryAdjustment" json:"memoryAdjustment"`
	Template         Template `yaml:"template" json:"template"`
	CNI              CNI      `yaml:"cni" json:"cni"`
	// Autoscaler is the cluster-autoscaler's scale-down profile.
	Autoscaler Autoscaler `yaml:"autoscaler" json:"autoscaler"`
}

// FileControlPlane is the cluster's control plane: kubeadm's VMs with a
// kube-vip VIP (the default), or a Kamaji hosted control plane.
type FileControlPlane struct {
	// Provider is kubeadm (empty means kubeadm) or kamaji.
	Provider string `yaml:"provider,omitempty" json:"provider,omitempty"`
	// Endpoint is the kube-vip VIP: in network.cidr, outside nodeIPRange.
	// Kubeadm only: a Kamaji control plane is reached at management.ip:port.
	Endpoint string `yaml:"endpoint,omitempty" json:"endpoint,omitempty"`
	// Port is a Kamaji control plane's API port on the management VM's
	// address, where k3s's ServiceLB publishes it: one port per tenant.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
	// Replicas are control-plane VMs (kubeadm: 1, 3 or 5) or the
	// Kamaji control plane's pods.
	Replicas *int `yaml:"replicas" json:"replicas"`
	// Size is a control-plane VM's size; kubeadm only.
	Size FileSize `yaml:"size,omitempty" json:"size,omitzero"`
}

// FileWorkers is a cluster's one worker pool, written as workers:
// autoscaled between Min and Max when Max > Min, a fixed Min workers
// otherwise.
type FileWorkers struct {
	Min  int      `yaml:"min" json:"min"`
	Max  *int     `yaml:"max" json:"max"`
	Size FileSize `yaml:"size" json:"size"`
	// Labels are key=value node labels every worker registers with.
	Labels []string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Taints are key[=value]:Effect taints every worker registers with.
	Taints []string `yaml:"taints,omitempty" json:"taints,omitempty"`
}

// FilePool is one entry of clusters[].pools.
type FilePool struct {
	Name string `yaml:"name" json:"name"`
	// Hypervisors are where the pool's machines go: the cluster's Proxmox
	// hypervisor, or one or more libvirt hosts (the machines are spread
	// by free memory). Empty means the cluster's hypervisor.
	Hypervisors []string `yaml:"hypervisors,omitempty" json:"hypervisors,omitempty"`
	Min         int      `yaml:"min" json:"min"`
	Max         *int     `yaml:"max" json:"max"`
	Size        FileSize `yaml:"size" json:"size"`
	// Labels are key=value node labels every worker registers with.
	Labels []string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Taints are key[=value]:Effect taints every worker registers with.
	Taints []string `yaml:"taints,omitempty" json:"taints,omitempty"`
	// Template is the pool's node image when it differs from the
	// cluster's (a libvirt pool of a Proxmox cluster: template.volume).
	Template *Template `yaml:"template,omitempty" json:"template,omitempty"`
}

// Messages for numbers written as 0 where a left-out one takes a default:
// defaulting a written 0 would hide that it asks for what labctl cannot do.
const (
	zeroCPUs       = "must be between 1 and 512, got 0"
	zeroMax        = "must be at least 1 so the autoscaler can add a worker, got 0"
	zeroReplicas   = "must be an odd number (1, 3 or 5) so etcd keeps quorum, got 0"
	zeroMemoryAdjt = "must be a percentage between 1 and 1000 (100 means no overcommit), got 0; 0 would turn off CAPMOX's memory check, leave the field out for the default 100"
)

// converter turns a File into a Lab, collecting the problems only the
// file's form can have: a written 0 that would take a default, and a
// cluster with both workers and pools.
type converter struct{ errs []*Error }

func (cv *converter) add(p *field.Path, format string, args ...any) {
	cv.errs = append(cv.errs, &Error{Field: p.String(), Msg: fmt.Sprintf(format, args...)})
}

// set is the value of n, 0 (unset: the default applies) when left out
// or written 0, which is refused with msg.
func (cv *converter) set(p *field.Path, n *int, msg string) int {
	switch {
	case n == nil:
		return 0
	case *n == 0:
		cv.add(p, "%s", msg)
	}
	return *n
}

func (cv *converter) size(p *field.Path, s FileSize) Size {
	return Size{CPUs: cv.set(p.Child("cpus"), s.CPUs, zeroCPUs), Memory: s.Memory, Disk: s.Disk}
}

// convert is f as the model: every cluster's workers become its one pool,
// named workers. Defaults are not filled in yet (SetDefaults).
func convert(f *File) (*Lab, []*Error) {
	cv := &converter{}
	fm := f.Management
	lab := &Lab{
		APIVersion: f.APIVersion, Kind: f.Kind, Metadata: f.Metadata, Hypervisors: f.Hypervisors, Network: f.Network,
		Management: Management{
			Hypervisor: fm.Hypervisor, Node: fm.Node, Name: fm.Name, VMID: fm.VMID, IP: fm.IP,
			Size:       cv.size(field.NewPath("management", "size"), fm.Size),
			K3sVersion: fm.K3sVersion, Image: fm.Image, User: fm.User,
			SSHPublicKeys: fm.SSHPublicKeys, SSHPublicKeyFile: fm.SSHPublicKeyFile, Stack: fm.Stack,
		},
		Images: f.Images, ScaleTest: f.ScaleTest,
	}
	for i, fc := range f.Clusters {
		cp := field.NewPath("clusters").Index(i)
		c := Cluster{
			Name: fc.Name, Hypervisor: fc.Hypervisor, AllowedNodes: fc.AllowedNodes, KubernetesVersion: fc.KubernetesVersion,
			ControlPlane: ControlPlane{
				Provider: fc.ControlPlane.Provider, Endpoint: fc.ControlPlane.Endpoint, Port: fc.ControlPlane.Port,
				Replicas: cv.set(cp.Child("controlPlane", "replicas"), fc.ControlPlane.Replicas, zeroReplicas),
				Size:     cv.size(cp.Child("controlPlane", "size"), fc.ControlPlane.Size),
			},
			NodeIPRange: fc.NodeIPRange, PodCIDR: fc.PodCIDR, ServiceCIDR: fc.ServiceCIDR,
			MemoryAdjustment: cv.set(cp.Child("memoryAdjustment"), fc.MemoryAdjustment, zeroMemoryAdjt),
			Template:         fc.Template, CNI: fc.CNI, Autoscaler: fc.Autoscaler,
		}
		w := fc.Workers
		workersSet := w.Min != 0 || w.Max != nil || w.Size != (FileSize{}) || len(w.Labels) > 0 || len(w.Taints) > 0
		if len(fc.Pools) == 0 {
			wp := cp.Child("workers")
			c.workersForm = true
			c.Pools = []Pool{{Name: DefaultPool, Min: w.Min, Max: cv.set(wp.Child("max"), w.Max, zeroMax),
				Size: cv.size(wp.Child("size"), w.Size), Labels: w.Labels, Taints: w.Taints}}
		} else if workersSet {
			cv.add(cp.Child("workers"), "is set together with pools; a cluster has either workers (one pool) or pools: move it into pools as '- name: %s' or drop it", DefaultPool)
		}
		for j, fp := range fc.Pools {
			pp := cp.Child("pools").Index(j)
			c.Pools = append(c.Pools, Pool{Name: fp.Name, Hypervisors: fp.Hypervisors, Min: fp.Min,
				Max: cv.set(pp.Child("max"), fp.Max, zeroMax), Size: cv.size(pp.Child("size"), fp.Size),
				Labels: fp.Labels, Taints: fp.Taints, Template: fp.Template})
		}
		lab.Clusters = append(lab.Clusters, c)
	}
	return lab, cv.errs
}

// FileOf is lab as lab.yaml: the file's forms it was read in (workers
// stays workers), with every default written out, so that Parse reads it
// back to the same lab.
func FileOf(lab *Lab) *File {
	m := lab.Management
	f := &File{
		APIVersion: lab.APIVersion, Kind: lab.Kind, Metadata: lab.Metadata, Hypervisors: lab.Hypervisors, Network: lab.Network,
		Management: FileManagement{
			Hypervisor: m.Hypervisor, Node: m.Node, Name: m.Name, VMID: m.VMID, IP: m.IP, Size: fileSize(m.Size),
			K3sVersion: m.K3sVersion, Image: m.Image, User: m.User,
			SSHPublicKeys: m.SSHPublicKeys, SSHPublicKeyFile: m.SSHPublicKeyFile, Stack: m.Stack,
		},
		Images: lab.Images, ScaleTest: lab.ScaleTest,
	}
	for _, c := range lab.Clusters {
		fc := FileCluster{
			Name: c.Name, Hypervisor: c.Hypervisor, AllowedNodes: c.AllowedNodes, KubernetesVersion: c.KubernetesVersion,
			ControlPlane: FileControlPlane{Provider: c.ControlPlane.Provider, Endpoint: c.ControlPlane.Endpoint, Port: c.ControlPlane.Port,
				Replicas: written(c.ControlPlane.Replicas), Size: fileSize(c.ControlPlane.Size)},
			NodeIPRange: c.NodeIPRange, PodCIDR: c.PodCIDR, ServiceCIDR: c.ServiceCIDR,
			MemoryAdjustment: written(c.MemoryAdjustment), Template: c.Template, CNI: c.CNI, Autoscaler: c.Autoscaler,
		}
		if c.workersForm && len(c.Pools) == 1 {
			p := c.Pools[0]
			fc.Workers = FileWorkers{Min: p.Min, Max: written(p.Max), Size: fileSize(p.Size), Labels: p.Labels, Taints: p.Taints}
		} else {
			for _, p := range c.Pools {
				fc.Pools = append(fc.Pools, FilePool{Name: p.Name, Hypervisors: p.Hypervisors, Min: p.Min, Max: written(p.Max),
					Size: fileSize(p.Size), Labels: p.Labels, Taints: p.Taints, Template: p.Template})
			}
		}
		f.Clusters = append(f.Clusters, fc)
	}
	return f
}

func fileSize(s Size) FileSize {
	return FileSize{CPUs: written(s.CPUs), Memory: s.Memory, Disk: s.Disk}
}

// written is n as the file writes it: 0 (unset in the model) left out.
func written(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}
