package clusterapi

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/labctl/labctl/internal/config"
	libvirtv1 "github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// Tenants are clusters whose control plane Kamaji runs as pods in the
// management cluster (controlPlane.provider kamaji). Each is one Cluster
// of a labctl ClusterClass, one class per worker platform, which 'mgmt
// install' applies (TenantClusterClasses). The Cluster carries what is the
// tenant's own in the class's variables: its node addresses, where its
// machines go and how big they are. docs/tenants.md has the shape.

// ClassNamespace holds labctl's tenant ClusterClasses and their
// templates; each tenant's Cluster names it in topology.classRef, and
// Cluster API clones the templates into the tenant's namespace.
const ClassNamespace = "labctl-tenants"

// The kinds of tenants, beside kinds.go's. The Kamaji provider's Go
// module needs a Kamaji version the module proxy does not serve, so its
// kinds are spelled here; the real CRDs validate what labctl writes.
var (
	ClusterClassGVK               = clusterv1.GroupVersion.WithKind("ClusterClass")
	KamajiControlPlaneGVK         = kamajiGV.WithKind("KamajiControlPlane")
	KamajiControlPlaneTemplateGVK = kamajiGV.WithKind("KamajiControlPlaneTemplate")
	// TenantControlPlaneGVK is Kamaji's own object behind a
	// KamajiControlPlane, of the same name in the same namespace.
	TenantControlPlaneGVK = schema.GroupVersionKind{Group: "kamaji.clastix.io", Version: "v1alpha1", Kind: "TenantControlPlane"}
	// DataStoreGVK is Kamaji's datastore: where its tenants keep their
	// state, each under a prefix of its own.
	DataStoreGVK              = schema.GroupVersionKind{Group: "kamaji.clastix.io", Version: "v1alpha1", Kind: "DataStore"}
	ProxmoxClusterTemplateGVK = infraGV.WithKind("ProxmoxClusterTemplate")
	LibvirtClusterTemplateGVK = libvirtv1.GroupVersion.WithKind("LibvirtClusterTemplate")
)

// kamajiGV is the Kamaji control plane provider v0.20.0's API (contract
// v1beta2).
var kamajiGV = schema.GroupVersion{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha2"}

// TenantClass is the ClusterClass of tenants whose workers run on
// platform (config.PlatformProxmox or config.PlatformKVM).
func TenantClass(platform string) string { return "labctl-kamaji-" + platform }

// IsTenant reports whether Cluster c's control plane is Kamaji's: its
// controlPlaneRef says so, or, before the topology controller sets that,
// its class is one of labctl's tenant ClusterClasses.
func IsTenant(c *unstructured.Unstructured) bool {
	kind, _, _ := unstructured.NestedString(c.Object, "spec", "controlPlaneRef", "kind")
	class, _, _ := unstructured.NestedString(c.Object, "spec", "topology", "classRef", "name")
	return kind == KamajiControlPlaneGVK.Kind || strings.HasPrefix(class, TenantClass(""))
}

// tenantCPTemplate is the KamajiControlPlaneTemplate both classes share.
const tenantCPTemplate = "labctl-kamaji"

// workerClass is the MachineDeployment class of each tenant ClusterClass:
// every pool of a tenant is one MachineDeployment of it.
const workerClass = "worker"

// The variables of the tenant ClusterClasses.
const (
	varNodeIPRange      = "nodeIPRange"
	varAllowedNodes     = "allowedNodes"
	varMemoryAdjustment = "memoryAdjustment"
	varLibvirtCluster   = "libvirtCluster"
	varMachine          = "machine"
	varNodeLabels       = "nodeLabels"
	varNodeTaints       = "nodeTaints"
)

// Endpoint is where cluster c's API server is reached: its kube-vip VIP
// on 6443, or for a tenant the management VM's address and the tenant's
// port, where k3s's ServiceLB publishes the Kamaji control plane's
// LoadBalancer Service (docs/tenants.md).
func Endpoint(lab *config.Lab, c *config.Cluster) (string, int) {
	if c.Kamaji() {
		return lab.Management.IP, c.ControlPlane.Port
	}
	return c.ControlPlane.Endpoint, APIServerPort
}

// TenantClusterClasses renders labctl's tenant ClusterClasses with their
// templates, in the namespace ClassNamespace, for 'mgmt install' to apply:
// one class for workers on Proxmox VE when the lab has a Proxmox
// hypervisor, one for workers on KVM hosts when it has libvirt hosts
// machines can go to. None when the lab needs no Kamaji
// (config.Lab.Providers). in.Cluster is not read.
func TenantClusterClasses(in Input) ([]*unstructured.Unstructured, error) {
	lab := in.Lab
	if !lab.Providers().Kamaji {
		return nil, nil
	}
	keys, err := in.sshKeys("tenant ClusterClasses")
	if err != nil {
		return nil, err
	}
	cr := &classRenderer{in: in, keys: keys}
	ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ClassNamespace, Labels: cr.labels()}}
	if err := cr.add(ns); err != nil {
		return nil, err
	}
	if err := cr.add(cr.controlPlaneTemplate()); err != nil {
		return nil, err
	}
	if px := firstProxmox(lab); px != nil {
		if err := cr.proxmoxClass(px); err != nil {
			return nil, err
		}
	}
	if hosts := remoteLibvirtHosts(lab); len(hosts) > 0 {
		if err := cr.kvmClass(hosts); err != nil {
			return nil, err
		}
	}
	return cr.out, nil
}

// firstProxmox is the Proxmox hypervisor of the lab's first tenant on
// Proxmox, else the lab's first Proxmox hypervisor; nil without one.
func firstProxmox(lab *config.Lab) *config.Hypervisor {
	for _, c := range lab.Clusters {
		if h, err := lab.Hypervisor(c.Hypervisor); err == nil && c.Kamaji() && h.Proxmox != nil {
			return h
		}
	}
	for i := range lab.Hypervisors {
		if lab.Hypervisors[i].Proxmox != nil {
			return &lab.Hypervisors[i]
		}
	}
	return nil
}

// remoteLibvirtHosts are the libvirt hosts cluster machines can go to
// (config.WhyNoClustersOn).
func remoteLibvirtHosts(lab *config.Lab) []*config.Hypervisor {
	var out []*config.Hypervisor
	for i := range lab.Hypervisors {
		h := &lab.Hypervisors[i]
		if h.Libvirt != nil && h.Proxmox == nil && config.WhyNoClustersOn(h) == "" {
			out = append(out, h)
		}
	}
	return out
}

type classRenderer struct {
	in   Input
	keys []string // the owner's public keys, read once
	out  []*unstructured.Unstructured
}

func (cr *classRenderer) add(obj any) error { return appendObject(&cr.out, obj) }

// TopologyPool is pool's entry in a Cluster's
// spec.topology.workers.machineDeployments, or nil, with the names of
// the other entries.
func TopologyPool(cl *unstructured.Unstructured, pool string) (entry map[string]any, others []string) {
	mds, _, _ := unstructured.NestedSlice(cl.Object, "spec", "topology", "workers", "machineDeployments")
	for _, x := range mds {
		md, _ := x.(map[string]any)
		if n, _ := md["name"].(string); n == pool {
			entry = md
		} else {
			others = append(others, n)
		}
	}
	return entry, others
}

func (cr *classRenderer) labels() map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelLab: cr.in.Lab.Metadata.Name}
}

func (cr *classRenderer) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ClassNamespace, Labels: cr.labels()}
}

// object is an object of a kind labctl has no Go type for.
func (cr *classRenderer) object(gvk schema.GroupVersionKind, name string, spec map[string]any) map[string]any {
	labels := map[string]any{}
	for k, v := range cr.labels() {
		labels[k] = v
	}
	return map[string]any{
		"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind,
		"metadata": map[string]any{"name": name, "namespace": ClassNamespace, "labels": labels},
		"spec":     spec,
	}
}

// controlPlaneTemplate is the Kamaji control plane of every tenant: its
// API server behind a LoadBalancer Service at the management VM's
// address, which k3s's ServiceLB publishes on the port the tenant's
// Cluster names (clusterNetwork.apiServerPort, which the provider makes
// the TenantControlPlane's port); kube-proxy as Kamaji's addon, as
// kubeadm clusters have it. Not Kamaji's CoreDNS addon: it applies
// kubeadm's manifest at system-cluster-critical with force, which keeps
// the last worker; the tenant's own ClusterResourceSet installs
// CoreDNS instead (TenantAddons). No konnectivity: its server
// would take a second port per tenant, and the management VM reaches the
// workers' kubelets on the lab network itself. dataStoreName is left to
// Kamaji's default DataStore.
func (cr *classRenderer) controlPlaneTemplate() map[string]any {
	spec := map[string]any{
		"addons": map[string]any{"kubeProxy": map[string]any{}},
		"network": map[string]any{
			"serviceType":    "LoadBalancer",
			"serviceAddress": cr.in.Lab.Management.IP,
		},
		"kubelet": map[string]any{"preferredAddressTypes": []any{"InternalIP", "ExternalIP", "Hostname"}},
	}
	return cr.object(KamajiControlPlaneTemplateGVK, tenantCPTemplate, map[string]any{"template": map[string]any{"spec": spec}})
}

// bootstrapTemplate is the workers' KubeadmConfigTemplate: the owner's
// user and keys, kubelet's provider-id from the platform's meta-data, and
// Cilium's startup taint. The pool's labels and taints come in through
// the class's patches.
func (cr *classRenderer) bootstrapTemplate(name string, libvirt bool) *bootstrapv1.KubeadmConfigTemplate {
	taints := []corev1.Taint{startupTaint()}
	return &bootstrapv1.KubeadmConfigTemplate{
		TypeMeta:   typeMeta(KubeadmConfigTemplateGVK),
		ObjectMeta: cr.meta(name),
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
			Spec: bootstrapv1.KubeadmConfigSpec{
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: bootstrapv1.NodeRegistrationOptions{
					KubeletExtraArgs: []bootstrapv1.Arg{providerID(libvirt)}, Taints: &taints,
				}},
				Users: users(cr.in.Lab, cr.keys),
			},
		}},
	}
}

// proxmoxClass renders the class of tenants with workers on Proxmox VE.
func (cr *classRenderer) proxmoxClass(h *config.Hypervisor) error {
	name := TenantClass(config.PlatformProxmox)
	n := cr.in.Lab.Network
	pfx := netip.MustParsePrefix(n.CIDR) // validated by config
	infra := cr.object(ProxmoxClusterTemplateGVK, name, map[string]any{"template": map[string]any{"spec": map[string]any{
		// The Kamaji provider writes the endpoint into the ProxmoxCluster.
		"externalManagedControlPlane": true,
		// CAPMOX's webhook refuses a template without an IP pool ("proxmox
		// cluster must define at least one IP pool config"); the
		// nodeIPRange patch replaces this one in every tenant. Should it
		// ever not, the pool holds only the gateway, which the in-cluster
		// IPAM never hands out: machines wait rather than take LAN
		// addresses.
		"ipv4Config":     map[string]any{"addresses": []any{n.Gateway}, "prefix": int64(pfx.Bits()), "gateway": n.Gateway},
		"dnsServers":     stringsAny(n.DNS),
		"schedulerHints": map[string]any{"memoryAdjustment": int64(config.DefaultMemoryAdjustment)},
	}}})
	if err := cr.add(infra); err != nil {
		return err
	}
	kct := cr.bootstrapTemplate(name+"-worker", false)
	if err := cr.add(kct); err != nil {
		return err
	}
	// A valid stand-in: the machine variable replaces the whole spec.
	node := h.Proxmox.Nodes[0]
	spec := proxmoxMachineSpec{Full: true, Storage: node.Storage, NumSockets: 1, NumCores: 2, MemoryMiB: 2048,
		TemplateSelector: &templateSelector{MatchTags: []string{"labctl"}}}
	spec.Disks.BootVolume.Disk, spec.Disks.BootVolume.SizeGB = bootDisk, 30
	spec.Network.NetworkDevices = []networkDevice{{Name: "net0", Bridge: node.Bridge, Model: "virtio", DefaultIPv4: true}}
	pmt := &proxmoxMachineTemplate{APIVersion: ProxmoxMachineTemplateGVK.GroupVersion().String(), Kind: ProxmoxMachineTemplateGVK.Kind,
		Metadata: objectMeta{Name: name + "-worker", Namespace: ClassNamespace, Labels: cr.labels()}}
	pmt.Spec.Template.Spec = spec
	if err := cr.add(pmt); err != nil {
		return err
	}
	infraPatch := fmt.Sprintf("addresses:\n- \"{{ .%s }}\"\ngateway: %q\nprefix: %d\n", varNodeIPRange, n.Gateway, pfx.Bits())
	cc := cr.class(name, ProxmoxClusterTemplateGVK, ProxmoxMachineTemplateGVK, kct.Name,
		[]clusterv1.ClusterClassVariable{
			variable(varNodeIPRange, "the tenant's node addresses, first-last in the lab network (lab.yaml nodeIPRange)",
				clusterv1.JSONSchemaProps{Type: "string", MinLength: ptr.To[int64](1)}),
			variable(varAllowedNodes, "the Proxmox nodes the tenant's machines may go to",
				clusterv1.JSONSchemaProps{Type: "array", MinItems: ptr.To[int64](1), Items: &clusterv1.JSONSchemaProps{Type: "string"}}),
			variable(varMemoryAdjustment, "CAPMOX schedulerHints.memoryAdjustment in percent (lab.yaml memoryAdjustment)",
				clusterv1.JSONSchemaProps{Type: "integer", Minimum: ptr.To[int64](1), Maximum: ptr.To[int64](1000)}),
		},
		clusterv1.PatchDefinition{
			Selector: selectInfra(ProxmoxClusterTemplateGVK),
			JSONPatches: []clusterv1.JSONPatch{
				{Op: "add", Path: "/spec/template/spec/ipv4Config", ValueFrom: &clusterv1.JSONPatchValue{Template: infraPatch}},
				{Op: "add", Path: "/spec/template/spec/allowedNodes", ValueFrom: &clusterv1.JSONPatchValue{Variable: varAllowedNodes}},
				{Op: "replace", Path: "/spec/template/spec/schedulerHints/memoryAdjustment", ValueFrom: &clusterv1.JSONPatchValue{Variable: varMemoryAdjustment}},
			},
		})
	return cr.add(cc)
}

// kvmClass renders the class of tenants with workers on KVM hosts
// (labctl's libvirt provider).
func (cr *classRenderer) kvmClass(hosts []*config.Hypervisor) error {
	name := TenantClass(config.PlatformKVM)
	first := hosts[0].Libvirt
	// A valid stand-in: the libvirtCluster variable replaces the whole
	// spec with the tenant's hosts, credentials and address pool.
	spec := libvirtv1.LibvirtClusterSpec{
		Network:          libvirtv1.NetworkSpec{Bridge: first.Bridge, Network: first.Network, DNSServers: cr.in.Lab.Network.DNS},
		IPPool:           libvirtv1.IPPoolReference{APIGroup: InClusterIPPoolGVK.Group, Kind: InClusterIPPoolGVK.Kind, Name: "nodes"},
		MemoryAdjustment: config.DefaultMemoryAdjustment,
	}
	for _, h := range hosts {
		spec.Hosts = append(spec.Hosts, libvirtv1.LibvirtHost{Name: h.Name, URI: h.Libvirt.URI,
			CredentialsRef: libvirtv1.SecretReference{Name: "libvirt-" + h.Name}, ControlPlane: ptr.To(false)})
	}
	lct := &libvirtv1.LibvirtClusterTemplate{TypeMeta: typeMeta(LibvirtClusterTemplateGVK), ObjectMeta: cr.meta(name),
		Spec: libvirtv1.LibvirtClusterTemplateSpec{Template: libvirtv1.LibvirtClusterTemplateResource{Spec: spec}}}
	if err := cr.add(lct); err != nil {
		return err
	}
	kct := cr.bootstrapTemplate(name+"-worker", true)
	if err := cr.add(kct); err != nil {
		return err
	}
	lmt := &libvirtv1.LibvirtMachineTemplate{TypeMeta: typeMeta(LibvirtMachineTemplateGVK), ObjectMeta: cr.meta(name + "-worker"),
		Spec: libvirtv1.LibvirtMachineTemplateSpec{Template: libvirtv1.LibvirtMachineTemplateResource{Spec: libvirtv1.LibvirtMachineSpec{
			CPUs: 2, MemoryMiB: 2048, DiskGiB: 30, Image: libvirtv1.ImageVolume{Pool: first.StoragePool, Volume: "node-image.qcow2"},
		}}}}
	if err := cr.add(lmt); err != nil {
		return err
	}
	cc := cr.class(name, LibvirtClusterTemplateGVK, LibvirtMachineTemplateGVK, kct.Name,
		[]clusterv1.ClusterClassVariable{
			variable(varLibvirtCluster, "the tenant's LibvirtCluster spec: its KVM hosts with their credentials Secrets, network and address pool",
				clusterv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}),
		},
		clusterv1.PatchDefinition{
			Selector: selectInfra(LibvirtClusterTemplateGVK),
			JSONPatches: []clusterv1.JSONPatch{
				{Op: "replace", Path: "/spec/template/spec", ValueFrom: &clusterv1.JSONPatchValue{Variable: varLibvirtCluster}},
			},
		})
	return cr.add(cc)
}

// class is a tenant ClusterClass: the Kamaji control plane, the
// platform's infrastructure, and one MachineDeployment class whose
// machine, node labels and taints each pool sets through variables.
func (cr *classRenderer) class(name string, infra, machine schema.GroupVersionKind, bootstrap string,
	vars []clusterv1.ClusterClassVariable, infraPatch clusterv1.PatchDefinition) *clusterv1.ClusterClass {
	tref := func(gvk schema.GroupVersionKind, name string) clusterv1.ClusterClassTemplateReference {
		return clusterv1.ClusterClassTemplateReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name}
	}
	vars = append(vars,
		variable(varMachine, "a pool's machine: the spec of its "+machine.Kind,
			clusterv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}),
		variable(varNodeLabels, "a pool's node labels, key=value,... (kubelet --node-labels)",
			clusterv1.JSONSchemaProps{Type: "string"}),
		variable(varNodeTaints, "a pool's node taints, Cilium's startup taint first",
			clusterv1.JSONSchemaProps{Type: "array", Items: &clusterv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}),
	)
	mdSelector := func(gvk schema.GroupVersionKind) clusterv1.PatchSelector {
		return clusterv1.PatchSelector{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			MatchResources: clusterv1.PatchSelectorMatch{MachineDeploymentClass: &clusterv1.PatchSelectorMatchMachineDeploymentClass{Names: []string{workerClass}}}}
	}
	nodeReg := "/spec/template/spec/joinConfiguration/nodeRegistration"
	return &clusterv1.ClusterClass{
		TypeMeta:   typeMeta(ClusterClassGVK),
		ObjectMeta: cr.meta(name),
		Spec: clusterv1.ClusterClassSpec{
			Infrastructure: clusterv1.InfrastructureClass{
				TemplateRef: tref(infra, name),
				Naming:      clusterv1.InfrastructureClassNamingSpec{Template: "{{ .cluster.name }}"},
			},
			ControlPlane: clusterv1.ControlPlaneClass{
				TemplateRef: tref(KamajiControlPlaneTemplateGVK, tenantCPTemplate),
				Naming:      clusterv1.ControlPlaneClassNamingSpec{Template: "{{ .cluster.name }}-control-plane"},
			},
			Workers: clusterv1.WorkersClass{MachineDeployments: []clusterv1.MachineDeploymentClass{{
				Class:          workerClass,
				Bootstrap:      clusterv1.MachineDeploymentClassBootstrapTemplate{TemplateRef: tref(KubeadmConfigTemplateGVK, bootstrap)},
				Infrastructure: clusterv1.MachineDeploymentClassInfrastructureTemplate{TemplateRef: tref(machine, name+"-worker")},
				// <cluster>-<pool>, as kubeadm clusters' pools are named, so
				// every command finds a pool by the same name.
				Naming: clusterv1.MachineDeploymentClassNamingSpec{Template: "{{ .cluster.name }}-{{ .machineDeployment.topologyName }}"},
				Rollout: clusterv1.MachineDeploymentClassRolloutSpec{Strategy: clusterv1.MachineDeploymentClassRolloutStrategy{
					Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentClassRolloutStrategyRollingUpdate{
						MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
					},
				}},
			}}},
			Variables: vars,
			Patches: []clusterv1.ClusterClassPatch{
				{Name: "infrastructure", Definitions: []clusterv1.PatchDefinition{infraPatch}},
				{Name: "machine", Definitions: []clusterv1.PatchDefinition{{
					Selector:    mdSelector(machine),
					JSONPatches: []clusterv1.JSONPatch{{Op: "replace", Path: "/spec/template/spec", ValueFrom: &clusterv1.JSONPatchValue{Variable: varMachine}}},
				}}},
				{Name: "node-registration", Definitions: []clusterv1.PatchDefinition{{
					Selector: mdSelector(KubeadmConfigTemplateGVK),
					JSONPatches: []clusterv1.JSONPatch{
						{Op: "add", Path: nodeReg + "/kubeletExtraArgs/-", ValueFrom: &clusterv1.JSONPatchValue{
							Template: "name: node-labels\nvalue: \"{{ ." + varNodeLabels + " }}\"\n"}},
						{Op: "replace", Path: nodeReg + "/taints", ValueFrom: &clusterv1.JSONPatchValue{Variable: varNodeTaints}},
					},
				}}},
			},
		},
	}
}

func variable(name, desc string, schema clusterv1.JSONSchemaProps) clusterv1.ClusterClassVariable {
	schema.Description = desc
	return clusterv1.ClusterClassVariable{Name: name, Required: ptr.To(true), Schema: clusterv1.VariableSchema{OpenAPIV3Schema: schema}}
}

func selectInfra(gvk schema.GroupVersionKind) clusterv1.PatchSelector {
	return clusterv1.PatchSelector{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
		MatchResources: clusterv1.PatchSelectorMatch{InfrastructureCluster: ptr.To(true)}}
}

func stringsAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// renderTenant renders a tenant: its Namespace, for a tenant on KVM hosts
// the hosts' credentials Secrets (without data, as for every cluster) and
// its node address pool, and the one Cluster of its ClusterClass; then
// its autoscaler.
func (r *renderer) renderTenant() (*Rendered, error) {
	c := r.c
	platform := r.in.Lab.TenantPlatform(c)
	nsObj := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: r.labels()}}
	if err := r.add(nsObj); err != nil {
		return nil, err
	}
	var clusterVars []clusterv1.ClusterVariable
	var err error
	if platform == config.PlatformKVM {
		if err := r.add(r.nodePool()); err != nil {
			return nil, err
		}
		// The hosts of every pool (validation keeps them on one network).
		var hosts []string
		for _, p := range c.Pools {
			for _, hv := range p.Hypervisors {
				if !slices.Contains(hosts, hv) {
					hosts = append(hosts, hv)
				}
			}
		}
		lc, err := r.libvirtClusterObject(c.Name, hosts, false)
		if err != nil {
			return nil, err
		}
		lc.Spec.IPPool.Name = NodePoolName(c.Name)
		clusterVars, err = vars(clusterVars, varLibvirtCluster, lc.Spec)
		if err != nil {
			return nil, err
		}
	} else {
		if r.px == nil {
			return nil, fmt.Errorf("cluster %s: its pools are on Proxmox, but its hypervisor %s is not a Proxmox one", c.Name, c.Hypervisor)
		}
		if clusterVars, err = vars(clusterVars, varNodeIPRange, strings.ReplaceAll(c.NodeIPRange, " ", "")); err != nil {
			return nil, err
		}
		if clusterVars, err = vars(clusterVars, varAllowedNodes, r.allowedNodes()); err != nil {
			return nil, err
		}
		if clusterVars, err = vars(clusterVars, varMemoryAdjustment, c.MemoryAdjustment); err != nil {
			return nil, err
		}
	}
	var pools []PoolRender
	var mds []clusterv1.MachineDeploymentTopology
	for i, p := range c.Pools {
		pr, md, poolVars, err := r.tenantPool(p, platform == config.PlatformKVM)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			// The class's pool variables are required: the Cluster gives
			// the first pool's, and every pool its own as overrides.
			clusterVars = append(clusterVars, poolVars...)
		}
		pools = append(pools, pr)
		mds = append(mds, md)
	}
	cl := &clusterv1.Cluster{
		TypeMeta:   typeMeta(ClusterGVK),
		ObjectMeta: r.meta(c.Name),
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				// The Kamaji provider makes it the TenantControlPlane's port.
				APIServerPort: int32(c.ControlPlane.Port),
				Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{c.PodCIDR}},
				Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{c.ServiceCIDR}},
			},
			Topology: clusterv1.Topology{
				ClassRef:     clusterv1.ClusterClassRef{Name: TenantClass(platform), Namespace: ClassNamespace},
				Version:      c.KubernetesVersion,
				ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To(int32(c.ControlPlane.Replicas))},
				Workers:      clusterv1.WorkersTopology{MachineDeployments: mds},
				Variables:    clusterVars,
			},
		},
	}
	if err := r.add(cl); err != nil {
		return nil, err
	}
	if err := r.tenantAddons(); err != nil {
		return nil, err
	}
	return r.finish(controlPlaneName(c.Name), pools)
}

// tenantPool is one pool of a tenant: a MachineDeployment of the class's
// worker class, its machine, labels and taints in variables, and the
// autoscaler's bounds and scale-from-zero capacity in its metadata.
// A pool the autoscaler owns never gets replicas.
func (r *renderer) tenantPool(p config.Pool, libvirt bool) (PoolRender, clusterv1.MachineDeploymentTopology, []clusterv1.ClusterVariable, error) {
	c := r.c
	pr := PoolRender{Name: p.Name, MachineDeployment: PoolMachineDeploymentName(c.Name, p.Name), Hypervisors: p.Hypervisors,
		Autoscaled: p.Autoscaled(), Min: p.Min, Max: p.Max}
	md := clusterv1.MachineDeploymentTopology{Class: workerClass, Name: p.Name}
	role := "pool-" + p.Name
	var machine any
	if libvirt {
		host, err := r.in.Lab.Hypervisor(p.Hypervisors[0])
		if err != nil {
			return pr, md, nil, fmt.Errorf("cluster %s: pool %s: %w", c.Name, p.Name, err)
		}
		t, err := r.libvirtMachineTemplate(role, p.Size, c.PoolTemplate(p), host, "")
		if err != nil {
			return pr, md, nil, err
		}
		pr.Kind, machine = LibvirtMachineTemplateGVK.Kind, t.Spec.Template.Spec
	} else {
		t, err := r.machineTemplate(role, p.Size)
		if err != nil {
			return pr, md, nil, err
		}
		pr.Kind, machine = ProxmoxMachineTemplateGVK.Kind, t.Spec.Template.Spec
	}
	taints := []corev1.Taint{startupTaint()}
	for _, t := range p.Taints {
		taints = append(taints, parseTaint(t))
	}
	var poolVars []clusterv1.ClusterVariable
	var err error
	if poolVars, err = vars(poolVars, varMachine, machine); err != nil {
		return pr, md, nil, err
	}
	if poolVars, err = vars(poolVars, varNodeLabels, strings.Join(workerLabels(p), ",")); err != nil {
		return pr, md, nil, err
	}
	if poolVars, err = vars(poolVars, varNodeTaints, taints); err != nil {
		return pr, md, nil, err
	}
	md.Variables.Overrides = poolVars
	if !p.Autoscaled() {
		md.Replicas = ptr.To(int32(p.Min))
		return pr, md, poolVars, nil
	}
	ann, err := r.capacity(p, libvirt)
	if err != nil {
		return pr, md, nil, err
	}
	ann[AnnotationMinSize] = strconv.Itoa(p.Min)
	ann[AnnotationMaxSize] = strconv.Itoa(p.Max)
	md.Metadata.Annotations = ann
	return pr, md, poolVars, nil
}

// vars appends variable name with value v, as JSON.
func vars(list []clusterv1.ClusterVariable, name string, v any) ([]clusterv1.ClusterVariable, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("rendering variable %s: %w", name, err)
	}
	return append(list, clusterv1.ClusterVariable{Name: name, Value: apiextensionsv1.JSON{Raw: data}}), nil
}
