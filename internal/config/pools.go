package config

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxVolumeName bounds template.volume: the provider's
// LibvirtMachineTemplate takes at most 253 characters there.
const maxVolumeName = 253

// pools checks the cluster's worker pools and returns how many workers
// they may reach together, for the node range.
func (v *validator) pools(cp *field.Path, c *Cluster, h *Hypervisor) int {
	if c.workersForm && len(c.Pools) == 1 {
		// The file's workers: the cluster's own hypervisor and template.
		v.workers(cp.Child("workers"), &c.Pools[0])
		return c.Pools[0].Max
	}
	total := 0
	names := map[string]int{}
	for j := range c.Pools {
		p := &c.Pools[j]
		pp := cp.Child("pools").Index(j)
		v.name(pp.Child("name"), p.Name)
		if k, dup := names[p.Name]; dup && p.Name != "" {
			v.add(pp.Child("name"), "%q is also the name of pools[%d]; each pool needs its own name", p.Name, k)
		} else {
			names[p.Name] = j
		}
		// The MachineDeployment <cluster>-<pool> is a label value too.
		if md := c.Name + "-" + p.Name; len(md) > 63 && dnsLabel.MatchString(p.Name) {
			v.add(pp.Child("name"), "makes the MachineDeployment name %s, %d characters; shorten the pool or cluster name to at most 63 together", md, len(md))
		}
		v.workers(pp, p)
		v.poolHypervisors(pp, c, h, p)
		total += p.Max
	}
	return total
}

// workers checks a pool's bounds, size, labels and taints.
func (v *validator) workers(p *field.Path, w *Pool) {
	for _, b := range CheckBounds(w.Min, w.Max, lastName(p.String())+".min") {
		v.add(p.Child(b.Field), "%s", b.Msg)
	}
	v.size(p.Child("size"), w.Size, 1, 1<<30)
	v.workerLabels(p, w)
}

// poolHypervisors checks where a pool's machines go: the cluster's own
// Proxmox hypervisor (CAPMOX places them through the cluster's
// ProxmoxCluster), or libvirt hosts that share one storage pool and one
// network, because the pool's LibvirtCluster and machine template name
// one of each.
func (v *validator) poolHypervisors(pp *field.Path, c *Cluster, ch *Hypervisor, p *Pool) {
	hp := pp.Child("hypervisors")
	if len(p.Hypervisors) == 0 {
		return // the cluster's hypervisor is missing: reported at clusters[].hypervisor
	}
	var libvirts []*Hypervisor
	seen := map[string]int{}
	proxmox := false
	for k, name := range p.Hypervisors {
		ip := hp.Index(k)
		if first, dup := seen[name]; dup {
			v.add(ip, "%s is listed twice (also hypervisors[%d])", name, first)
			continue
		}
		seen[name] = k
		h := v.placement(ip, nil, name, "")
		if h == nil {
			continue
		}
		if why := WhyNoClustersOn(h); why != "" {
			v.add(ip, "%s", why)
			continue
		}
		if h.Proxmox != nil {
			proxmox = true
			if name != c.Hypervisor || ch == nil || ch.Proxmox == nil {
				v.add(ip, "%s is a Proxmox hypervisor, and a pool runs on Proxmox only as the cluster's own hypervisor (CAPMOX places machines through the cluster's ProxmoxCluster); name %s or libvirt hosts", name, orExample(clusterProxmox(c, ch), "the cluster's Proxmox hypervisor"))
			}
			continue
		}
		libvirts = append(libvirts, h)
	}
	switch {
	case proxmox && len(libvirts) > 0:
		v.add(hp, "mixes Proxmox and libvirt hosts; a pool runs on one kind: make two pools")
	case len(libvirts) > 0:
		base := libvirts[0].Libvirt
		for _, h := range libvirts[1:] {
			if l := h.Libvirt; l.StoragePool != base.StoragePool || l.Network != base.Network || l.Bridge != base.Bridge {
				v.add(hp, "%s and %s differ in storagePool, network or bridge (%s vs %s); the pool's machine template and LibvirtCluster name one of each, so list only hosts that share them, or make two pools",
					libvirts[0].Name, h.Name, hostPlace(base), hostPlace(l))
				break
			}
		}
	}
	tp := pp.Child("template")
	switch {
	case len(libvirts) > 0 && !proxmox:
		t := c.PoolTemplate(*p)
		if p.Template == nil && (ch == nil || ch.Proxmox != nil) {
			v.add(tp, "is required for a pool on libvirt hosts: set template.image (a libvirt image under images) or template.volume, the node image volume in storage pool %s of each host", libvirts[0].Libvirt.StoragePool)
			return
		}
		v.volumeTemplate(tp, t, c, libvirts)
	case p.Template != nil:
		v.add(tp, "is for pools on libvirt hosts; a Proxmox pool clones the cluster's template, so drop it")
	}
}

// clusterProxmox is the cluster's hypervisor when it is a Proxmox one.
func clusterProxmox(c *Cluster, h *Hypervisor) string {
	if h != nil && h.Proxmox != nil {
		return c.Hypervisor
	}
	return ""
}

func hostPlace(l *Libvirt) string {
	at := "bridge " + l.Bridge
	if l.Network != "" {
		at = "network " + l.Network
	}
	return "pool " + l.StoragePool + ", " + at
}

// volumeTemplate checks a node image on libvirt hosts: template.volume, or
// template.image naming a libvirt image that 'image build' uploads to
// every one of hosts; none of the Proxmox ways.
func (v *validator) volumeTemplate(p *field.Path, t Template, c *Cluster, hosts []*Hypervisor) {
	host := hosts[0].Name
	if t.TemplateID != 0 || t.SourceNode != "" {
		v.add(p, "sets templateID or sourceNode, which find Proxmox templates; on libvirt host %s the node image is template.image (a libvirt image under images) or template.volume, a volume in the host's storage pool", host)
	}
	if t.Image != "" {
		if t.Volume != "" {
			v.add(p, "sets image and volume; use one: image names the volume 'image build' uploads (%s)", orExample(v.imageVolume(t.Image), "<image>-<kubernetesVersion>.qcow2"))
			return
		}
		img := v.image(t.Image)
		if img == nil {
			v.add(p.Child("image"), "unknown image %q; add it under images (with hosts %s) or set template.volume", t.Image, host)
			return
		}
		for _, h := range hosts {
			if !slices.Contains(img.Hosts, h.Name) {
				v.add(p.Child("image"), "image %q is not uploaded to libvirt host %s (its hosts: %s); add %s to images[%s].hosts, or build an image there", t.Image, h.Name, strings.Join(img.Hosts, ", "), h.Name, t.Image)
				return
			}
		}
		if img.KubernetesVersion != c.KubernetesVersion {
			v.add(p.Child("image"), "image %q is Kubernetes %s but the cluster runs %s; the nodes' kubelet and kubeadm come from the image, so set both to the same version", t.Image, img.KubernetesVersion, c.KubernetesVersion)
		}
		return
	}
	switch {
	case t.Volume == "":
		v.add(p.Child("volume"), "is required on libvirt host %s: the node image volume in its storage pool, e.g. ubuntu-2404-kube-v1.35.4.qcow2 (or set template.image to a libvirt image under images)", host)
	case len(t.Volume) > maxVolumeName || strings.ContainsAny(t.Volume, "/ \t\n") || t.Volume == "." || t.Volume == "..":
		v.add(p.Child("volume"), "%q is not a volume name: a file name in the storage pool (no '/' or spaces, at most %d characters), e.g. ubuntu-2404-kube-v1.35.4.qcow2", t.Volume, maxVolumeName)
	}
}

func (v *validator) imageVolume(name string) string {
	if img := v.image(name); img != nil {
		return img.VolumeName()
	}
	return ""
}

// maxWhat names what the node range must hold workers for.
func maxWhat(c *Cluster) string {
	if c.workersForm {
		return "workers.max"
	}
	return fmt.Sprintf("the pools' max together (%d pools)", len(c.Pools))
}

var taintEffects = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}

// labelOK checks a label (or taint) key and value with Kubernetes' own
// rules, the ones the API server applies to a Node. (A hand-written regexp
// for the key, with its {0,251} repeat, cost every labctl start 2 ms to
// compile.)
func labelOK(key, value string) bool {
	return len(validation.IsQualifiedName(key)) == 0 && len(validation.IsValidLabelValue(value)) == 0
}

// workerLabels checks a pool's labels (key=value) and taints
// (key[=value]:Effect), which kubelet registers and the autoscaler's
// scale-from-zero annotations repeat.
func (v *validator) workerLabels(p *field.Path, w *Pool) {
	for i, l := range w.Labels {
		k, val, ok := strings.Cut(l, "=")
		if !ok || !labelOK(k, val) {
			v.add(p.Child("labels").Index(i), "%q is not a node label key=value, e.g. labctl.dev/pool=workers", l)
		} else if strings.Contains(k, "kubernetes.io/") && !strings.HasPrefix(k, "node.kubernetes.io/") {
			v.add(p.Child("labels").Index(i), "%q: kubelet may not set labels under kubernetes.io except node.kubernetes.io/; use your own prefix", l)
		}
	}
	for i, t := range w.Taints {
		kv, effect, ok := strings.Cut(t, ":")
		k, val, _ := strings.Cut(kv, "=")
		if !ok || !labelOK(k, val) || !oneOf(effect, taintEffects) {
			v.add(p.Child("taints").Index(i), "%q is not a taint key[=value]:Effect with Effect one of %s, e.g. dedicated=batch:NoSchedule", t, strings.Join(taintEffects, ", "))
		}
	}
}
