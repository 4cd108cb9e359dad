package clusterapi

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/versions"
)

const (
	tenantAddonsManifest = "manifests/tenant/addons.yaml"
	coreDNSImage         = "registry.k8s.io/coredns/coredns"

	// ExpendableCutoff is each autoscaler's --expendable-pods-priority-cutoff
	// (cluster-autoscaler 1.35.0's default, said out loud because tenants
	// rely on it): pods below it neither keep a node nor raise a pool.
	ExpendableCutoff = -10
	// TenantAddonPriorityClass is the PriorityClass of a tenant's system
	// pods, CoreDNS and Cilium's operator, valued below ExpendableCutoff
	// (embedded/manifests/tenant/addons.yaml says why).
	TenantAddonPriorityClass = "labctl-tenant-addons"
	tenantAddonPriority      = ExpendableCutoff - 90

	// tenantClusterDomain is Kamaji's default for a TenantControlPlane's
	// networkProfile.clusterDomain, which labctl's class leaves unset.
	tenantClusterDomain = "cluster.local"
)

// TenantAddons are the objects 'cluster create' applies inside a tenant
// before Cilium: the PriorityClass of its system pods and CoreDNS at that
// priority. Kamaji's own CoreDNS addon is off in labctl's tenant class.
func TenantAddons(c *config.Cluster, pins versions.Pins) ([]*unstructured.Unstructured, error) {
	dns, err := TenantDNSAddress(c)
	if err != nil {
		return nil, err
	}
	labels, err := json.Marshal(map[string]string{LabelManagedBy: ManagedBy})
	if err != nil {
		return nil, err
	}
	return renderManifest(tenantAddonsManifest, map[string]any{
		"Labels":        string(labels),
		"PriorityClass": TenantAddonPriorityClass,
		"Priority":      tenantAddonPriority,
		"Image":         coreDNSImage + ":" + pins.CoreDNS,
		"DNSIP":         dns.String(),
		"Corefile":      corefile(tenantClusterDomain),
	})
}

// TenantDNSAddress is the address Kamaji gives a tenant's kubelets as
// clusterDNS when dnsServiceIPs is unset, as in labctl's class: the
// Service CIDR's first address plus 10 (e51909f,
// internal/webhook/handlers/tcp_defaults.go), kubeadm's rule too.
func TenantDNSAddress(c *config.Cluster) (netip.Addr, error) {
	p, err := netip.ParsePrefix(c.ServiceCIDR)
	if err != nil || !p.Addr().Is4() {
		return netip.Addr{}, fmt.Errorf("cluster %s: its Service CIDR %q is not an IPv4 prefix; set clusters[].serviceCIDR to one, such as 10.96.0.0/12", c.Name, c.ServiceCIDR)
	}
	a := p.Masked().Addr().As4()
	a[3] += 10
	return netip.AddrFrom4(a), nil
}

// corefile is kubeadm v1.35's Corefile for the cluster domain
// (cmd/kubeadm/app/phases/addons/dns/manifests.go, CoreDNSConfigMap).
func corefile(domain string) string {
	return fmt.Sprintf(`.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes %[1]s in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success %[1]s
       disable denial %[1]s
    }
    loop
    reload
    loadbalance
}
`, domain)
}
