package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func (v *validator) kubeVersion(p *field.Path, s string) bool {
	if err := CheckKubernetesVersion(s); err != nil {
		v.add(p, "%s", err)
		return false
	}
	return true
}

// CheckKubernetesVersion says why s cannot be a workload cluster's
// Kubernetes version: not vMAJOR.MINOR.PATCH, or outside what the pinned
// Cluster API and CAPMOX run. lab.yaml's validation and 'cluster upgrade
// --to' share it.
func CheckKubernetesVersion(s string) error {
	m := kubeVersionRe.FindStringSubmatch(s)
	if m == nil {
		return fmt.Errorf("%q is not a Kubernetes version such as v1.35.4", s)
	}
	var minor int
	fmt.Sscan(m[1], &minor)
	if minor > maxKubernetesMinor || minor < minKubernetesMinor {
		return fmt.Errorf("%s is not supported: Cluster API 1.12 with CAPMOX v0.9 runs v1.%d to v1.%d", s, minKubernetesMinor, maxKubernetesMinor)
	}
	return nil
}

func (v *validator) clusters(p *field.Path) {
	names := map[string]bool{}
	// Addresses in use that VIPs and node ranges must stay clear of.
	taken := map[netip.Addr]string{}
	for _, a := range v.lanAddrs() {
		taken[a.addr] = a.what
	}
	if mgmtIP, err := netip.ParseAddr(v.lab.Management.IP); err == nil {
		if _, ok := taken[mgmtIP]; !ok {
			taken[mgmtIP] = "the management VM's IP"
		}
	}
	sortedTaken := sortedAddrs(taken)
	for i := range v.lab.Clusters {
		c := &v.lab.Clusters[i]
		cp := p.Index(i)
		v.name(cp.Child("name"), c.Name)
		if names[c.Name] && c.Name != "" {
			v.add(cp.Child("name"), "duplicate cluster name %q", c.Name)
		}
		names[c.Name] = true
		h := v.placement(cp.Child("hypervisor"), nil, c.Hypervisor, "")
		if h != nil {
			if why := WhyNoClustersOn(h); why != "" {
				v.add(cp.Child("hypervisor"), "%s", why)
				h = nil
			}
		}
		switch {
		case h != nil && h.Proxmox != nil && len(h.Proxmox.Nodes) > 0:
			v.allowedNodes(cp, c, h)
		case h != nil && h.Proxmox == nil && len(c.AllowedNodes) > 0:
			v.add(cp.Child("allowedNodes"), "is only for Proxmox hypervisors; %s is a libvirt host, drop allowedNodes", h.Name)
		}
		// Control plane and workers.
		var versionOK bool
		r := c.ControlPlane.Replicas
		cpVMs := r // machines the node range must hold for the control plane
		switch c.ControlPlane.Provider {
		case "", ControlPlaneKubeadm:
			versionOK = v.kubeVersion(cp.Child("kubernetesVersion"), c.KubernetesVersion)
			if r != 1 && r != 3 && r != 5 {
				// etcd needs an odd count for quorum; above 5 members every
				// write waits on more peers for no gain in a lab.
				v.add(cp.Child("controlPlane", "replicas"), "must be an odd number (1, 3 or 5) so etcd keeps quorum, got %d", r)
			}
			v.size(cp.Child("controlPlane", "size"), c.ControlPlane.Size, 2, 2<<30)
			if c.ControlPlane.Port != 0 {
				v.add(cp.Child("controlPlane", "port"), "is for Kamaji control planes (provider: kamaji); a kubeadm control plane listens on %d at its VIP, controlPlane.endpoint: drop port", kubeadmAPIPort)
			}
		case ControlPlaneKamaji:
			versionOK = v.kamaji(cp, c, h)
			cpVMs = 0
		default:
			versionOK = v.kubeVersion(cp.Child("kubernetesVersion"), c.KubernetesVersion)
			v.add(cp.Child("controlPlane", "provider"), "%q is not a control plane provider; use kubeadm (control-plane VMs with a kube-vip VIP, the default) or kamaji (a hosted control plane in the management cluster, docs/tenants.md)", c.ControlPlane.Provider)
		}
		maxWorkers := v.pools(cp, c, h)
		v.autoscaler(cp.Child("autoscaler"), c.Autoscaler)

		// Addresses: the VIP, the node range, pod and service CIDRs.
		var vip netip.Addr
		vipOK := false
		if !c.Kamaji() {
			vip, vipOK = v.hostIP(cp.Child("controlPlane", "endpoint"), c.ControlPlane.Endpoint, true)
		}
		if vipOK {
			if what, ok := taken[vip]; ok {
				v.add(cp.Child("controlPlane", "endpoint"), "%s is %s; the VIP needs an address of its own", vip, what)
			}
			if other, ok := v.vips[vip]; ok {
				v.add(cp.Child("controlPlane", "endpoint"), "%s is also the endpoint of %s; each cluster needs its own VIP", vip, other)
			} else {
				v.vips[vip] = cp.String()
			}
		}
		rp := cp.Child("nodeIPRange")
		rng, rngOK := v.ipRange(rp, c.NodeIPRange)
		if rngOK {
			if need := maxWorkers + cpVMs; rng.size() < need && cpVMs == 0 {
				v.add(rp, "holds %d addresses, but %s need %d; widen the range", rng.size(), maxWhat(c), need)
			} else if rng.size() < need {
				v.add(rp, "holds %d addresses, but %s (%d) + controlPlane.replicas (%d) need %d; widen the range", rng.size(), maxWhat(c), maxWorkers, r, need)
			}
			if vipOK && rng.contains(vip) {
				v.add(cp.Child("controlPlane", "endpoint"), "%s is inside nodeIPRange %s; the VIP must be outside the range nodes get their addresses from", vip, c.NodeIPRange)
			}
			for _, a := range addrsIn(sortedTaken, rng.first, rng.last) {
				v.add(rp, "contains %s %s; nodes would take that address, so move the range", taken[a], a)
			}
			for j, other := range v.ranges {
				if rng.overlaps(other) {
					v.add(rp, "overlaps %s (%s); clusters need separate ranges", v.rangeOf[j], other)
				}
			}
			v.ranges = append(v.ranges, rng)
			v.rangeOf = append(v.rangeOf, rp.String())
		}
		pod := v.cidr(cp.Child("podCIDR"), c.PodCIDR)
		svc := v.cidr(cp.Child("serviceCIDR"), c.ServiceCIDR)
		if pod.IsValid() && v.subnet.IsValid() && pod.Overlaps(v.subnet) {
			v.add(cp.Child("podCIDR"), "%s overlaps the lab network %s; pick a range outside it, e.g. %s", pod, v.subnet, v.freeCIDR(DefaultPodCIDR, svc))
		}
		if svc.IsValid() && v.subnet.IsValid() && svc.Overlaps(v.subnet) {
			v.add(cp.Child("serviceCIDR"), "%s overlaps the lab network %s; pick a range outside it, e.g. %s", svc, v.subnet, v.freeCIDR(DefaultServiceCIDR, pod))
		}
		if pod.IsValid() && svc.IsValid() && pod.Overlaps(svc) {
			v.add(cp.Child("serviceCIDR"), "%s overlaps podCIDR %s; pick a range clear of it, e.g. %s", svc, pod, v.freeCIDR(DefaultServiceCIDR, pod))
		}
		if pod.IsValid() && pod.Bits() > 24 {
			v.add(cp.Child("podCIDR"), "%s is too small: each node takes a /24; use /16", pod)
		}

		if c.MemoryAdjustment < 1 || c.MemoryAdjustment > 1000 {
			v.add(cp.Child("memoryAdjustment"), "must be a percentage between 1 and 1000 (100 means no overcommit), got %d", c.MemoryAdjustment)
		}
		v.template(cp, c, h, versionOK)
		v.lanAddresses(cp, pod, svc)
		if !ciliumRe.MatchString(c.CNI.Cilium) {
			v.add(cp.Child("cni", "cilium"), "%q is not a Cilium chart version such as 1.18.4", c.CNI.Cilium)
		}
	}
	v.vipsOutsideRanges(p)
}

// allowedNodes checks clusters[].allowedNodes against hypervisor h: each
// a node of it, once, and all on one bridge and storage, because the
// cluster's ProxmoxMachineTemplates name one of each.
func (v *validator) allowedNodes(cp *field.Path, c *Cluster, h *Hypervisor) {
	first := map[string]int{}
	for j, n := range c.AllowedNodes {
		ap := cp.Child("allowedNodes").Index(j)
		if !v.hasNode(h, n) {
			v.add(ap, "unknown node %q on hypervisor %s; it has: %s", n, h.Name, strings.Join(nodeNames(h.Proxmox), ", "))
		} else if k, dup := first[n]; dup {
			v.add(ap, "%s is listed twice (also allowedNodes[%d])", n, k)
		} else {
			first[n] = j
		}
	}
	if _, err := v.lab.ClusterNode(c); isNodeMismatch(err) {
		v.add(cp.Child("allowedNodes"), "%s", err.Error())
	}
}

// vipsOutsideRanges checks every VIP against the node ranges of the other
// clusters: nodes there would get the VIP as their address.
func (v *validator) vipsOutsideRanges(p *field.Path) {
	// Clusters are at most maxListEntries, so this is at most a million
	// comparisons of two addresses.
	for i, c := range v.lab.Clusters {
		vip, err := netip.ParseAddr(c.ControlPlane.Endpoint)
		if err != nil {
			continue
		}
		own := p.Index(i).Child("nodeIPRange").String() // checked in clusters
		for j, r := range v.ranges {
			if v.rangeOf[j] != own && r.contains(vip) {
				v.add(p.Index(i).Child("controlPlane", "endpoint"), "%s is inside %s (%s); the VIP must be outside every cluster's node range", vip, v.rangeOf[j], r)
			}
		}
	}
}

// lanAddresses checks that the pod and service CIDRs leave the addresses
// nodes must reach on the LAN alone: DNS servers and the Proxmox API.
func (v *validator) lanAddresses(cp *field.Path, pod, svc netip.Prefix) {
	addrs := v.lanAddrs()
	for _, c := range []struct {
		name, eg   string
		pfx, other netip.Prefix
	}{{"podCIDR", DefaultPodCIDR, pod, svc}, {"serviceCIDR", DefaultServiceCIDR, svc, pod}} {
		if !c.pfx.IsValid() || (v.subnet.IsValid() && c.pfx.Overlaps(v.subnet)) {
			continue // invalid or overlapping the lab network: reported already
		}
		for _, a := range addrs {
			if c.pfx.Contains(a.addr) {
				v.add(cp.Child(c.name), "%s contains %s %s; pick a range outside the LAN, e.g. %s", c.pfx, a.what, a.addr, v.freeCIDR(c.eg, c.other))
				break
			}
		}
	}
}

func (v *validator) template(cp *field.Path, c *Cluster, h *Hypervisor, versionOK bool) {
	p := cp.Child("template")
	t := c.Template
	// By kind, even when the hypervisor was refused for clusters above.
	if k := v.hvs[c.Hypervisor]; k != nil && k.Proxmox == nil && k.Libvirt != nil {
		v.volumeTemplate(p, t, c, []*Hypervisor{k})
		return
	}
	switch {
	case t.Volume != "":
		v.add(p.Child("volume"), "is for clusters on libvirt hosts; %s is a Proxmox hypervisor, so drop volume and use image or templateID", c.Hypervisor)
	case t.Image != "" && (t.TemplateID != 0 || t.SourceNode != ""):
		v.add(p, "sets image and templateID/sourceNode; use one: image finds the template by its tags")
	case t.Image != "":
		img := v.image(t.Image)
		switch {
		case img == nil:
			v.add(p.Child("image"), "unknown image %q; add it under images or set templateID and sourceNode", t.Image)
		case h != nil && v.hvs[img.Hypervisor] != nil && img.Hypervisor != c.Hypervisor:
			v.add(p.Child("image"), "image %q is built on hypervisor %s, but the cluster runs on %s; build an image there", t.Image, img.Hypervisor, c.Hypervisor)
		case versionOK && img.KubernetesVersion != c.KubernetesVersion:
			v.add(cp.Child("kubernetesVersion"), "%s does not match %s of its template image %q; the nodes' kubelet and kubeadm come from the image, so set both to the same version", c.KubernetesVersion, img.KubernetesVersion, t.Image)
		default:
			v.templateNodeAllowed(cp, c, h, img.Node, fmt.Sprintf("the template of image %q", t.Image))
		}
	case t.TemplateID != 0:
		if t.TemplateID < minVMID || t.TemplateID > maxVMID {
			v.add(p.Child("templateID"), "must be a VM id between %d and %d, got %d", minVMID, maxVMID, t.TemplateID)
		} else if m := v.lab.Management; t.TemplateID == m.VMID && c.Hypervisor == m.Hypervisor {
			v.add(p.Child("templateID"), "%d is the management VM's id, not a template; use the id the image build printed", t.TemplateID)
		}
		if t.SourceNode == "" {
			v.add(p.Child("sourceNode"), "is required with templateID: the node that holds the template")
		} else if h != nil && h.Proxmox != nil && len(h.Proxmox.Nodes) > 0 && !v.hasNode(h, t.SourceNode) {
			v.add(p.Child("sourceNode"), "unknown node %q on hypervisor %s", t.SourceNode, h.Name)
		} else {
			v.templateNodeAllowed(cp, c, h, t.SourceNode, fmt.Sprintf("template %d (template.sourceNode)", t.TemplateID))
		}
	default:
		v.add(p, "needs image (a name under images) or templateID with sourceNode")
	}
}

// templateNodeAllowed checks that the node holding the cluster's template
// is one of its allowedNodes: CAPMOX clones every machine onto that node
// (the disks are node-local), so a cluster allowed elsewhere only could
// never get a VM.
func (v *validator) templateNodeAllowed(cp *field.Path, c *Cluster, h *Hypervisor, node, template string) {
	if node == "" || len(c.AllowedNodes) == 0 || slices.Contains(c.AllowedNodes, node) || h == nil || !v.hasNode(h, node) {
		return
	}
	v.add(cp.Child("allowedNodes"), "does not list %s, the node that holds %s: every machine is cloned from it onto that node (PVE clones onto another node only from shared storage); add %s to allowedNodes",
		node, template, node)
}

// autoscaler checks the cluster-autoscaler's scale-down profile.
func (v *validator) autoscaler(p *field.Path, a Autoscaler) {
	for _, d := range []struct{ name, val string }{
		{"scanInterval", a.ScanInterval}, {"scaleDownUnneededTime", a.ScaleDownUnneededTime},
		{"scaleDownDelayAfterAdd", a.ScaleDownDelayAfterAdd}, {"scaleDownDelayAfterDelete", a.ScaleDownDelayAfterDelete},
		{"maxNodeProvisionTime", a.MaxNodeProvisionTime},
	} {
		if dur, err := time.ParseDuration(d.val); err != nil || dur < 0 {
			v.add(p.Child(d.name), "%q is not a duration such as 1m or 10s", d.val)
		}
	}
	if f, err := strconv.ParseFloat(a.ScaleDownUtilizationThreshold, 64); err != nil || f <= 0 || f > 1 {
		v.add(p.Child("scaleDownUtilizationThreshold"), "%q must be a fraction above 0 and at most 1, e.g. 0.5", a.ScaleDownUtilizationThreshold)
	}
}
