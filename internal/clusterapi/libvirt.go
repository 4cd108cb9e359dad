package clusterapi

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/labctl/labctl/internal/config"
	libvirtv1 "github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// AnnotationCredentialsOf is on each libvirt host's credentials Secret:
// the hypervisor of lab.yaml whose files fill it.
const AnnotationCredentialsOf = "labctl.dev/credentials-of"

// libvirtObjects are what a cluster's libvirt machines share.
type libvirtObjects struct {
	clusters map[string]bool   // LibvirtClusters rendered, by name
	secrets  []*corev1.Secret  // credentials, one per host
	secretOf map[string]string // Secret name by hypervisor
}

// CredentialsSecret is the Secret of a cluster's libvirt host hypervisor:
// its key and known_hosts, or its TLS client certificate.
func CredentialsSecret(cluster, hypervisor string) string { return cluster + "-libvirt-" + hypervisor }

// NodePoolName is the in-cluster IPAM pool a cluster wholly on libvirt
// hosts takes its node addresses from. A cluster on Proxmox has CAPMOX's,
// which its libvirt pools share.
func NodePoolName(cluster string) string { return cluster + "-nodes" }

// capmoxPool is the InClusterIPPool CAPMOX v0.9 makes for a ProxmoxCluster
// from its ipv4Config (pkg/kubernetes/ipam/ipam.go InClusterPoolFormat:
// <cluster>-v4-icip), so the machines of both kinds never get the same
// address.
func capmoxPool(cluster string) string { return cluster + "-v4-icip" }

// nodePool is the InClusterIPPool of a cluster wholly on libvirt hosts:
// nodeIPRange, the lab's gateway and prefix.
func (r *renderer) nodePool() map[string]any {
	c, n := r.c, r.in.Lab.Network
	pfx := netip.MustParsePrefix(n.CIDR) // validated by config
	return map[string]any{
		"apiVersion": InClusterIPPoolGVK.GroupVersion().String(), "kind": InClusterIPPoolGVK.Kind,
		"metadata": map[string]any{"name": NodePoolName(c.Name), "namespace": r.ns, "labels": r.labels()},
		"spec": map[string]any{
			"addresses": []string{strings.ReplaceAll(c.NodeIPRange, " ", "")},
			"prefix":    pfx.Bits(),
			"gateway":   n.Gateway,
		},
	}
}

// libvirtCluster renders the LibvirtCluster name on the hypervisors given
// (once per name) with a credentials Secret per host, and returns name.
// infra is the cluster's own (the Cluster's infrastructureRef): it
// carries the VIP.
func (r *renderer) libvirtCluster(name string, hypervisors []string, infra bool) (string, error) {
	lo := &r.libvirt
	if lo.clusters[name] {
		return name, nil
	}
	lc, err := r.libvirtClusterObject(name, hypervisors, infra)
	if err != nil {
		return "", err
	}
	return name, r.add(lc)
}

// libvirtClusterObject is the LibvirtCluster libvirtCluster adds, with
// its hosts' credentials Secrets rendered.
func (r *renderer) libvirtClusterObject(name string, hypervisors []string, infra bool) (*libvirtv1.LibvirtCluster, error) {
	lo := &r.libvirt
	if lo.clusters == nil {
		lo.clusters, lo.secretOf = map[string]bool{}, map[string]string{}
	}
	lo.clusters[name] = true
	c := r.c
	lc := &libvirtv1.LibvirtCluster{
		TypeMeta:   typeMeta(LibvirtClusterGVK),
		ObjectMeta: r.meta(name),
		Spec: libvirtv1.LibvirtClusterSpec{
			IPPool:           libvirtv1.IPPoolReference{APIGroup: InClusterIPPoolGVK.Group, Kind: InClusterIPPoolGVK.Kind, Name: capmoxPool(c.Name)},
			MemoryAdjustment: int32(c.MemoryAdjustment),
		},
	}
	if r.px == nil {
		lc.Spec.IPPool.Name = NodePoolName(c.Name)
	}
	if infra {
		lc.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: c.ControlPlane.Endpoint, Port: APIServerPort}
	}
	for i, hv := range hypervisors {
		h, err := r.in.Lab.Hypervisor(hv)
		if err != nil || h.Libvirt == nil {
			return nil, fmt.Errorf("cluster %s: %s is not a libvirt hypervisor of the lab", c.Name, hv)
		}
		if i == 0 {
			// Validation keeps every host of one LibvirtCluster on one network.
			lc.Spec.Network = libvirtv1.NetworkSpec{Bridge: h.Libvirt.Bridge, Network: h.Libvirt.Network, DNSServers: r.in.Lab.Network.DNS}
		}
		secret, err := r.credentials(h)
		if err != nil {
			return nil, err
		}
		host := libvirtv1.LibvirtHost{Name: h.Name, URI: h.Libvirt.URI, CredentialsRef: libvirtv1.SecretReference{Name: secret}}
		if !infra {
			// A pool's hosts are no failure domains of the control plane.
			host.ControlPlane = ptr.To(false)
		}
		lc.Spec.Hosts = append(lc.Spec.Hosts, host)
	}
	return lc, nil
}

// credentials renders host h's credentials Secret once, its data read
// through the Credentials: the keys the provider reads for its URI's
// transport (docs/libvirt-provider.md). Its type is the one Kubernetes
// has for those keys.
func (r *renderer) credentials(h *config.Hypervisor) (string, error) {
	lo := &r.libvirt
	if name, ok := lo.secretOf[h.Name]; ok {
		return name, nil
	}
	u, err := url.Parse(h.Libvirt.URI)
	if err != nil {
		return "", fmt.Errorf("cluster %s: hypervisors[%s].libvirt.uri: %w", r.c.Name, h.Name, err)
	}
	typ := corev1.SecretTypeSSHAuth
	if strings.HasSuffix(u.Scheme, "+tls") { // qemu+tls, or the test beds' test+tls
		typ = corev1.SecretTypeTLS
	}
	data, err := r.in.Credentials.Host(h)
	if err != nil {
		return "", fmt.Errorf("cluster %s: %w", r.c.Name, err)
	}
	name := CredentialsSecret(r.c.Name, h.Name)
	meta := r.meta(name)
	meta.Annotations = map[string]string{AnnotationCredentialsOf: h.Name}
	lo.secretOf[h.Name] = name
	lo.secrets = append(lo.secrets, &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta, Type: typ, Data: data})
	return name, nil
}

// libvirtMachineTemplate renders a LibvirtMachineTemplate named
// <cluster>-<role>-<memory>-<hash> on host's storage pool; cluster, when
// set, is the LibvirtCluster its machines go to (ClusterAnnotation).
func (r *renderer) libvirtMachineTemplate(role string, size config.Size, t config.Template, host *config.Hypervisor, cluster string) (*libvirtv1.LibvirtMachineTemplate, error) {
	mem, disk, err := r.quantities(role, size)
	if err != nil {
		return nil, err
	}
	volume := r.in.Lab.NodeVolume(t)
	if volume == "" {
		return nil, fmt.Errorf("cluster %s: %s on libvirt host %s has no node image; set template.image (a libvirt image under images) or template.volume", r.c.Name, role, host.Name)
	}
	res := libvirtv1.LibvirtMachineTemplateResource{Spec: libvirtv1.LibvirtMachineSpec{
		CPUs:      int32(size.CPUs),
		MemoryMiB: int32(mem.Value() >> 20),
		DiskGiB:   int32((disk.Value() + 1<<30 - 1) >> 30),
		Image:     libvirtv1.ImageVolume{Pool: host.Libvirt.StoragePool, Volume: volume},
	}}
	if cluster != "" {
		res.ObjectMeta.Annotations = map[string]string{libvirtv1.ClusterAnnotation: cluster}
	}
	name, err := hashName(r.c.Name+"-"+role, memTag(mem), res)
	if err != nil {
		return nil, err
	}
	return &libvirtv1.LibvirtMachineTemplate{TypeMeta: typeMeta(LibvirtMachineTemplateGVK), ObjectMeta: r.meta(name),
		Spec: libvirtv1.LibvirtMachineTemplateSpec{Template: res}}, nil
}
