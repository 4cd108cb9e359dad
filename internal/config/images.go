package config

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func (v *validator) imageList(p *field.Path) {
	for i, img := range v.lab.Images {
		ip := p.Index(i)
		v.name(ip.Child("name"), img.Name)
		if v.images[img.Name] != nil && img.Name != "" {
			v.add(ip.Child("name"), "duplicate image name %q", img.Name)
		} else if v.images[img.Name] == nil {
			v.images[img.Name] = &v.lab.Images[i]
		}
		if h := v.placement(ip.Child("hypervisor"), ip.Child("node"), img.Hypervisor, img.Node); h != nil {
			v.imageHosts(ip, h, img)
		}
		if !oneOf(img.OS, imageOSes) {
			v.add(ip.Child("os"), "%q is not supported; use one of %s", img.OS, strings.Join(imageOSes, ", "))
		}
		v.kubeVersion(ip.Child("kubernetesVersion"), img.KubernetesVersion)
		if h := v.hvs[img.Hypervisor]; h != nil && h.Proxmox == nil && img.VMID != 0 {
			v.add(ip.Child("vmid"), "is only for Proxmox templates; %s is a libvirt host, where the image is the volume %s: drop vmid", h.Name, img.VolumeName())
		} else if img.VMID != 0 && (img.VMID < minVMID || img.VMID > maxVMID) {
			v.add(ip.Child("vmid"), "must be between %d and %d, got %d", minVMID, maxVMID, img.VMID)
		} else if img.VMID != 0 {
			v.uniqueVMID(ip.Child("vmid"), img.Hypervisor, img.VMID)
		}
	}
}

// imageHosts checks images[].hosts: the libvirt hypervisors a libvirt
// image is uploaded to. A Proxmox image is a template on its node and
// takes none.
func (v *validator) imageHosts(ip *field.Path, h *Hypervisor, img Image) {
	hp := ip.Child("hosts")
	if h.Proxmox != nil {
		if len(img.Hosts) > 0 {
			v.add(hp, "is only for libvirt images; %s is a Proxmox VE hypervisor, where the image is a template on node %s: drop hosts", h.Name, img.Node)
		}
		return
	}
	seen := map[string]bool{}
	for j, name := range img.Hosts {
		o, ok := v.hvs[name]
		switch {
		case !ok:
			v.add(hp.Index(j), "unknown hypervisor %q; the lab has: %s", name, strings.Join(v.hypervisorNames(), ", "))
		case o.Proxmox != nil:
			v.add(hp.Index(j), "%s is a Proxmox VE hypervisor; list only libvirt hosts here (a Proxmox image is an image of its own, with hypervisor and node)", name)
		case seen[name]:
			v.add(hp.Index(j), "lists %s twice", name)
		}
		seen[name] = true
	}
	if len(img.Hosts) > 0 && !seen[h.Name] {
		v.add(hp, "does not list %s, the image's hypervisor; add it, or set hypervisor to one of the hosts", h.Name)
	}
}

func (v *validator) image(name string) *Image { return v.images[name] }
