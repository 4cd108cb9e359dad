package config

import (
	"strings"

	"github.com/labctl/labctl/internal/versions"
)

// Defaults applied to fields left empty. docs/config.md lists them too.
const (
	DefaultUser             = "ubuntu"
	DefaultMgmtName         = "labctl-mgmt"
	DefaultPodCIDR          = "10.244.0.0/16"
	DefaultServiceCIDR      = "10.96.0.0/12"
	DefaultMemoryAdjustment = 100
	DefaultInflateImage     = "registry.k8s.io/pause:3.10"
)

var (
	defaultMgmtSize    = Size{CPUs: 2, Memory: "4Gi", Disk: "30Gi"}
	defaultCPSize      = Size{CPUs: 2, Memory: "4Gi", Disk: "30Gi"}
	defaultWorkerSize  = Size{CPUs: 2, Memory: "2Gi", Disk: "30Gi"}
	defaultWorkersMax  = 3
	defaultScaleUp     = "15m"
	defaultScaleDown   = "20m"
	defaultFromZero    = "15m"
	defaultInflateCPU  = "1500m"
	defaultInflateMem  = "512Mi"
	defaultImageOS     = "ubuntu-2404"
	defaultCPReplicas  = 1
	defaultLibvirtPool = "default"
	// defaultAutoscaler is the owner's aggressive scale-down profile: an
	// idle worker goes after a minute, not cluster-autoscaler's ten.
	defaultAutoscaler = Autoscaler{
		ScanInterval:                  "10s",
		ScaleDownUnneededTime:         "1m",
		ScaleDownDelayAfterAdd:        "2m",
		ScaleDownDelayAfterDelete:     "10s",
		ScaleDownUtilizationThreshold: "0.5",
		MaxNodeProvisionTime:          "15m",
	}
)

// SetDefaults fills every field left empty. It is idempotent, so a defaulted
// config written out and read back stays the same.
func SetDefaults(lab *Lab, pins versions.Pins) {
	for i := range lab.Hypervisors {
		if lv := lab.Hypervisors[i].Libvirt; lv != nil && lv.StoragePool == "" {
			lv.StoragePool = defaultLibvirtPool
		}
	}
	m := &lab.Management
	if m.Name == "" {
		m.Name = DefaultMgmtName
	}
	if m.Hypervisor == "" && len(lab.Hypervisors) == 1 {
		m.Hypervisor = lab.Hypervisors[0].Name
	}
	if m.Node == "" {
		m.Node = soleNode(lab, m.Hypervisor)
	}
	defaultSize(&m.Size, defaultMgmtSize)
	if m.K3sVersion == "" {
		m.K3sVersion = pins.K3s
	}
	if m.Image.URL == "" {
		m.Image.URL = pins.UbuntuImage.URL
		if m.Image.Checksum == "" {
			m.Image.ChecksumURL = pins.UbuntuImage.ChecksumURL
		}
	}
	if m.User == "" {
		m.User = DefaultUser
	}

	for i := range lab.Images {
		img := &lab.Images[i]
		if img.Hypervisor == "" && len(lab.Hypervisors) == 1 {
			img.Hypervisor = lab.Hypervisors[0].Name
		}
		if img.Hypervisor == "" && len(img.Hosts) > 0 {
			img.Hypervisor = img.Hosts[0]
		}
		// A libvirt image goes to every libvirt host by default: a
		// LibvirtMachine is placed on whichever host holds the image and
		// has room.
		if h, err := lab.Hypervisor(img.Hypervisor); err == nil && h.Libvirt != nil && h.Proxmox == nil && len(img.Hosts) == 0 {
			for _, o := range lab.Hypervisors {
				if o.Libvirt != nil && o.Proxmox == nil {
					img.Hosts = append(img.Hosts, o.Name)
				}
			}
		}
		if img.Node == "" {
			img.Node = soleNode(lab, img.Hypervisor)
		}
		if img.OS == "" {
			img.OS = defaultImageOS
		}
		if img.KubernetesVersion == "" {
			img.KubernetesVersion = pins.Kubernetes
		}
	}

	for i := range lab.Clusters {
		c := &lab.Clusters[i]
		if c.Hypervisor == "" && len(lab.Hypervisors) == 1 {
			c.Hypervisor = lab.Hypervisors[0].Name
		}
		if t := c.Template; t.Image == "" && t.TemplateID == 0 && t.Volume == "" && len(lab.Images) == 1 && !onLibvirt(lab, c.Hypervisor) {
			c.Template.Image = lab.Images[0].Name
		}
		if c.KubernetesVersion == "" {
			// The nodes run the kubelet their template image was built with.
			c.KubernetesVersion = pins.Kubernetes
			if img, err := lab.Image(c.Template.Image); err == nil && kubeVersionRe.MatchString(img.KubernetesVersion) {
				c.KubernetesVersion = img.KubernetesVersion
			}
		}
		if c.ControlPlane.Replicas == 0 {
			c.ControlPlane.Replicas = defaultCPReplicas
		}
		if !c.Kamaji() {
			// A Kamaji control plane is pods, not VMs: it has no size.
			defaultSize(&c.ControlPlane.Size, defaultCPSize)
		}
		for j := range c.Pools {
			p := &c.Pools[j]
			if len(p.Hypervisors) == 0 && c.Hypervisor != "" {
				p.Hypervisors = []string{c.Hypervisor}
			}
			if p.Max == 0 && p.Min == 0 {
				p.Max = defaultWorkersMax
			}
			defaultSize(&p.Size, defaultWorkerSize)
		}
		if c.PodCIDR == "" {
			c.PodCIDR = DefaultPodCIDR
		}
		if c.ServiceCIDR == "" {
			c.ServiceCIDR = DefaultServiceCIDR
		}
		if c.MemoryAdjustment == 0 {
			c.MemoryAdjustment = DefaultMemoryAdjustment
		}
		if c.CNI.Cilium == "" {
			c.CNI.Cilium = pins.Cilium
		}
		a := &c.Autoscaler
		setIfEmpty(&a.ScanInterval, defaultAutoscaler.ScanInterval)
		setIfEmpty(&a.ScaleDownUnneededTime, defaultAutoscaler.ScaleDownUnneededTime)
		setIfEmpty(&a.ScaleDownDelayAfterAdd, defaultAutoscaler.ScaleDownDelayAfterAdd)
		setIfEmpty(&a.ScaleDownDelayAfterDelete, defaultAutoscaler.ScaleDownDelayAfterDelete)
		setIfEmpty(&a.ScaleDownUtilizationThreshold, defaultAutoscaler.ScaleDownUtilizationThreshold)
		setIfEmpty(&a.MaxNodeProvisionTime, defaultAutoscaler.MaxNodeProvisionTime)
	}

	st := &lab.ScaleTest
	setIfEmpty(&st.Workload.Image, DefaultInflateImage)
	setIfEmpty(&st.Workload.CPU, defaultInflateCPU)
	setIfEmpty(&st.Workload.Memory, defaultInflateMem)
	setIfEmpty(&st.Timeouts.ScaleUp, defaultScaleUp)
	setIfEmpty(&st.Timeouts.ScaleDown, defaultScaleDown)
	setIfEmpty(&st.Timeouts.FromZero, defaultFromZero)
}

func defaultSize(s *Size, d Size) {
	if s.CPUs == 0 {
		s.CPUs = d.CPUs
	}
	setIfEmpty(&s.Memory, d.Memory)
	setIfEmpty(&s.Disk, d.Disk)
}

func setIfEmpty(s *string, v string) {
	if strings.TrimSpace(*s) == "" {
		*s = v
	}
}

// onLibvirt reports whether the named hypervisor is a libvirt host.
func onLibvirt(lab *Lab, hypervisor string) bool {
	h, err := lab.Hypervisor(hypervisor)
	return err == nil && h.Libvirt != nil && h.Proxmox == nil
}

// soleNode is the Proxmox hypervisor's node when it has exactly one.
func soleNode(lab *Lab, hypervisor string) string {
	if h, err := lab.Hypervisor(hypervisor); err == nil && h.Proxmox != nil && len(h.Proxmox.Nodes) == 1 {
		return h.Proxmox.Nodes[0].Name
	}
	return ""
}
