package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// kubeadmAPIPort is where a kubeadm control plane serves, at its VIP.
	kubeadmAPIPort = 6443
	// maxKamajiMinor is the newest Kubernetes minor the pinned Kamaji
	// (e51909f, the one the Kamaji control plane provider v0.20.0 builds
	// against) runs a tenant control plane at.
	maxKamajiMinor = 35
	// maxKamajiReplicas bounds a Kamaji control plane's pods: they share
	// one datastore, so more only cost the management VM memory.
	maxKamajiReplicas = 3
	// firstTenantPort is where the suggested free ports start: above
	// k3s's own 6443 and 6444 (its supervisor and API server).
	firstTenantPort = 6445
)

// reservedPort says why a tenant cannot take port on the management VM,
// or "": k3s and kubelet listen on these, and ServiceLB's host ports must
// not take a NodePort.
func reservedPort(port int) string {
	switch {
	case port < 1024 || port > 65535:
		return "must be between 1024 and 65535"
	case port == 6443 || port == 6444:
		return "is k3s's own API port on the management VM"
	case port == 2379 || port == 2380:
		return "is etcd's port on the management VM"
	case port >= 10248 && port <= 10260:
		return "is a kubelet or control-plane port on the management VM"
	case port >= 30000 && port <= 32767:
		return "is in the management cluster's NodePort range 30000-32767"
	}
	return ""
}

// kamaji checks a cluster whose control plane is Kamaji's: no VIP, no
// control-plane size, an API port of its own on the management VM, a
// version Kamaji runs, and worker pools of one kind. It returns whether
// kubernetesVersion is valid.
func (v *validator) kamaji(cp *field.Path, c *Cluster, h *Hypervisor) bool {
	pp := cp.Child("controlPlane")
	versionOK := v.kamajiVersion(cp.Child("kubernetesVersion"), c.KubernetesVersion)
	if c.ControlPlane.Endpoint != "" {
		v.add(pp.Child("endpoint"), "is a kube-vip VIP, which a Kamaji control plane has none of: it runs as pods in the management cluster, reached at management.ip:controlPlane.port; drop endpoint")
	}
	if c.ControlPlane.Size != (Size{}) {
		v.add(pp.Child("size"), "is the size of control-plane VMs, and a Kamaji control plane has none (it runs as pods in the management cluster); drop size")
	}
	if r := c.ControlPlane.Replicas; r < 1 || r > maxKamajiReplicas {
		v.add(pp.Child("replicas"), "must be between 1 and %d (the Kamaji control plane's pods), got %d", maxKamajiReplicas, r)
	}
	if v.lab.Management.IP == "" {
		v.add(pp.Child("provider"), "kamaji publishes the tenant's API server at management.ip, and management.ip is not set; give the management VM a static address")
	}
	v.kamajiPort(pp.Child("port"), cp, c)
	v.kamajiPools(cp, c)
	return versionOK
}

// kamajiVersion is kubeVersion with Kamaji's bound, which is the one a
// tenant meets first.
func (v *validator) kamajiVersion(p *field.Path, s string) bool {
	m := kubeVersionRe.FindStringSubmatch(s)
	if m != nil {
		var minor int
		fmt.Sscan(m[1], &minor)
		if minor > maxKamajiMinor {
			v.add(p, "%s is newer than Kamaji runs: the pinned Kamaji takes tenant control planes up to v1.%d.x; set v1.%d.x", s, maxKamajiMinor, maxKamajiMinor)
			return false
		}
	}
	return v.kubeVersion(p, s)
}

// kamajiPort checks a tenant's API port: required, free on the management
// VM, and no other tenant's.
func (v *validator) kamajiPort(p, cp *field.Path, c *Cluster) {
	port := c.ControlPlane.Port
	if port == 0 {
		v.add(p, "is required for a Kamaji control plane: the tenant's API port on the management VM (k3s ServiceLB), one per tenant, e.g. %d", v.freeTenantPort())
		return
	}
	if why := reservedPort(port); why != "" {
		v.add(p, "%d %s; pick another, e.g. %d", port, why, v.freeTenantPort())
		return
	}
	if other, dup := v.ports[port]; dup {
		v.add(p, "%d is also the port of %s; each tenant needs its own endpoint (management.ip:port): pick another, e.g. %d", port, other, v.freeTenantPort())
		return
	}
	v.ports[port] = cp.String()
}

// freeTenantPort is the first port from firstTenantPort that no tenant of
// the lab takes.
func (v *validator) freeTenantPort() int {
	used := map[int]bool{}
	for _, c := range v.lab.Clusters {
		if c.Kamaji() {
			used[c.ControlPlane.Port] = true
		}
	}
	p := firstTenantPort
	for used[p] || reservedPort(p) != "" {
		p++
	}
	return p
}

// kamajiPools refuses a tenant whose pools are on both kinds of
// hypervisor: each tenant ClusterClass is one worker platform, and its
// Cluster's infrastructure is that platform's (ProxmoxCluster or
// LibvirtCluster).
func (v *validator) kamajiPools(cp *field.Path, c *Cluster) {
	kinds := map[bool][]string{} // libvirt? -> pool names
	for _, p := range c.Pools {
		if len(p.Hypervisors) == 0 {
			continue
		}
		h, err := v.lab.Hypervisor(p.Hypervisors[0])
		if err != nil {
			continue // reported at the pool
		}
		libvirt := h.Proxmox == nil && h.Libvirt != nil
		kinds[libvirt] = append(kinds[libvirt], p.Name)
	}
	if len(kinds[true]) > 0 && len(kinds[false]) > 0 {
		v.add(cp.Child("pools"), "mixes Proxmox pools (%v) and KVM pools (%v) in one tenant; a tenant's ClusterClass is one worker platform (docs/tenants.md): make two tenants", kinds[false], kinds[true])
	}
}

// TenantPlatform is the worker platform of a Kamaji cluster's pools:
// "proxmox" or "kvm" (the ClusterClass it is made from). Validation
// keeps a tenant's pools on one platform.
func (l *Lab) TenantPlatform(c *Cluster) string {
	for _, p := range c.Pools {
		if len(p.Hypervisors) == 0 {
			continue
		}
		if h, err := l.Hypervisor(p.Hypervisors[0]); err == nil && h.Proxmox == nil && h.Libvirt != nil {
			return PlatformKVM
		}
	}
	return PlatformProxmox
}

// Worker platforms of tenants: one ClusterClass each.
const (
	PlatformProxmox = "proxmox"
	PlatformKVM     = "kvm"
)

// Tenants are the lab's clusters with a Kamaji control plane.
func (l *Lab) Tenants() []*Cluster {
	var out []*Cluster
	for i := range l.Clusters {
		if l.Clusters[i].Kamaji() {
			out = append(out, &l.Clusters[i])
		}
	}
	return out
}
