package clusterapi

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	addonsv1 "sigs.k8s.io/cluster-api/api/addons/v1beta2"
	"sigs.k8s.io/yaml"

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

// ClusterResourceSetGVK is Cluster API's kind that applies objects kept
// in the management cluster inside the workload clusters it selects.
var ClusterResourceSetGVK = addonsv1.GroupVersion.WithKind("ClusterResourceSet")

// TenantAddonsName names a tenant's ClusterResourceSet and the ConfigMap
// holding what it applies.
func TenantAddonsName(cluster string) string { return cluster + "-addons" }

// tenantAddonsKey is the ConfigMap key holding the addons' manifest.
const tenantAddonsKey = "addons.yaml"

// TenantCiliumName names the ConfigMap holding a tenant's Cilium, which
// its ClusterResourceSet applies after the addons (whose PriorityClass
// Cilium's operator runs at).
func TenantCiliumName(cluster string) string { return cluster + "-cilium" }

// tenantCiliumKey is the ConfigMap key holding Cilium's manifest.
const tenantCiliumKey = "cilium.yaml"

// tenantAddons adds the tenant's addons (TenantAddons) and its Cilium
// (Input.Cilium) to its manifest as Cluster API delivers them: a
// ConfigMap holding each and a ClusterResourceSet that applies them
// inside the tenant once its control plane is initialized, and again
// whenever a ConfigMap changes (strategy Reconcile: a new CoreDNS or
// Cilium pin reaches running tenants). So 'kubectl apply' of the
// manifest alone gives the tenant its DNS and its CNI, as 'cluster
// create' does.
func (r *renderer) tenantAddons() error {
	objs, err := TenantAddons(r.c, r.in.Pins)
	if err != nil {
		return err
	}
	docs := make([]string, len(objs))
	for i, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		docs[i] = string(b)
	}
	name := TenantAddonsName(r.c.Name)
	cms := []*corev1.ConfigMap{{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: r.meta(name),
		Data:       map[string]string{tenantAddonsKey: strings.Join(docs, "---\n")},
	}}
	// A ConfigMap of its own: Cluster API keeps a hash per resource, so a
	// new CoreDNS pin does not apply Cilium again, nor the other way.
	if len(r.in.Cilium) > 0 {
		cms = append(cms, &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: r.meta(TenantCiliumName(r.c.Name)),
			Data:       map[string]string{tenantCiliumKey: string(r.in.Cilium)},
		})
	}
	crs := &addonsv1.ClusterResourceSet{
		TypeMeta:   typeMeta(ClusterResourceSetGVK),
		ObjectMeta: r.meta(name),
		Spec: addonsv1.ClusterResourceSetSpec{
			ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{ClusterNameLabel: r.c.Name}},
			Strategy:        string(addonsv1.ClusterResourceSetStrategyReconcile),
		},
	}
	for _, cm := range cms {
		// In this order: Cluster API applies the resources as listed.
		crs.Spec.Resources = append(crs.Spec.Resources, addonsv1.ResourceRef{Kind: "ConfigMap", Name: cm.Name})
		if err := r.add(cm); err != nil {
			return err
		}
	}
	return r.add(crs)
}

// TenantAddons are the objects inside a tenant that its ClusterResourceSet
// applies: the PriorityClass of its system pods and CoreDNS at that
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
