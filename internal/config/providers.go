package config

// OptionalProviders are the Cluster API providers beyond the ones every
// lab gets (core, kubeadm, CAPMOX where there is Proxmox, in-cluster
// IPAM) that 'mgmt install' installs.
type OptionalProviders struct {
	// Libvirt is labctl's own infrastructure provider for KVM hosts.
	Libvirt bool
	// Kamaji is the Kamaji control plane provider.
	Kamaji bool
	// ClusterTopology is Cluster API's ClusterClass feature gate: tenants
	// are Clusters of labctl's tenant ClusterClasses.
	ClusterTopology bool
}

// Providers says which optional providers the lab needs: those
// management.stack enables, and those its clusters call for (a cluster or
// pool on a libvirt host needs the libvirt provider; a cluster with
// controlPlane.provider kamaji needs Kamaji's, and the ClusterClass gate
// its ClusterClass needs). It is the one rule: 'mgmt
// install' installs what it says and validation reads it, so a lab that
// validates never fails at 'cluster create' for a provider the install
// left out.
func (lab *Lab) Providers() OptionalProviders {
	st := lab.Management.Stack
	p := OptionalProviders{Libvirt: st.Libvirt.Enabled, Kamaji: st.Kamaji.Enabled, ClusterTopology: st.ClusterClass}
	for i := range lab.Clusters {
		c := &lab.Clusters[i]
		if c.Kamaji() {
			p.Kamaji, p.ClusterTopology = true, true
		}
		hvs := []string{c.Hypervisor}
		for _, pool := range c.Pools {
			hvs = append(hvs, pool.Hypervisors...)
		}
		for _, name := range hvs {
			if h, err := lab.Hypervisor(name); err == nil && h.Libvirt != nil && h.Proxmox == nil {
				p.Libvirt = true
			}
		}
	}
	return p
}
