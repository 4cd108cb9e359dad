// Package clusterapi renders a lab.yaml cluster into Cluster API objects:
// CAPI v1beta2 (Go types from sigs.k8s.io/cluster-api/api) and CAPMOX
// v1alpha2, the storage versions of the pinned providers, plus the
// cluster's own cluster-autoscaler. It only builds objects; applying them
// is the caller's job.
package clusterapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/versions"
)

// Annotations and labels labctl writes.
const (
	AnnotationMinSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	AnnotationMaxSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
	// CapacityPrefix starts every scale-from-zero annotation.
	CapacityPrefix     = "capacity.cluster-autoscaler.kubernetes.io/"
	AnnotationCPU      = CapacityPrefix + "cpu"
	AnnotationMemory   = CapacityPrefix + "memory"
	AnnotationMaxPods  = CapacityPrefix + "maxPods"
	AnnotationLabels   = CapacityPrefix + "labels"
	AnnotationTaints   = CapacityPrefix + "taints"
	LabelManagedBy     = "app.kubernetes.io/managed-by"
	LabelLab           = "labctl.dev/lab"
	LabelPool          = "labctl.dev/pool"
	ManagedBy          = "labctl"
	WorkerPool         = config.DefaultPool
	APIServerPort      = 6443
	kubeletMaxPods     = 110 // kubelet's default; the scale-from-zero template says so
	bootDisk           = "scsi0"
	providerIDTemplate = "proxmox://'{{ ds.meta_data.instance_id }}'"
	// libvirtProviderIDTemplate is the provider-id meta-data key labctl's
	// libvirt provider writes into each machine's seed.
	libvirtProviderIDTemplate = "'{{ ds.meta_data.provider_id }}'"
)

// Input is what Render needs beyond lab.yaml.
type Input struct {
	Lab     *config.Lab
	Cluster string
	// Credentials reads what lab.yaml names outside itself: the owner's
	// public keys, put on every node, and the libvirt hosts' credentials.
	Credentials Credentials
	Pins        versions.Pins
	// Cilium is a tenant's Cilium, its chart rendered with CiliumValues
	// (cluster.TenantCilium): its ClusterResourceSet applies it inside
	// the tenant, so the manifest alone gives the tenant its CNI. Empty
	// leaves it out of the manifest (a render that applies nothing).
	Cilium []byte
}

// Credentials reads what the objects need from outside lab.yaml, as
// clusterctl's template resolves its variables through an injected
// client (credentials.Files reads the lab's files; tests hand in their
// own). The render returns whole objects, Secrets with their data.
type Credentials interface {
	// SSHKeys are the owner's public keys, put on every node.
	SSHKeys() ([]string, error)
	// Host is libvirt host h's credentials Secret data, under the keys
	// labctl's provider reads for its URI's transport
	// (docs/libvirt-provider.md).
	Host(h *config.Hypervisor) (map[string][]byte, error)
}

// sshKeys are in's public keys; at least one, as every node needs one.
func (in Input) sshKeys(what string) ([]string, error) {
	if in.Credentials == nil {
		return nil, fmt.Errorf("%s: no credentials reader given to the render", what)
	}
	keys, err := in.Credentials.SSHKeys()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no SSH public key to put on the nodes; set management.sshPublicKeys or management.sshPublicKeyFile", what)
	}
	return keys, nil
}

// Rendered is one cluster's objects in the management cluster.
type Rendered struct {
	Name      string
	Namespace string
	// Objects are the namespace, the libvirt hosts' credentials Secrets
	// (with their data: never print them), and the Cluster API objects,
	// in apply order.
	Objects []*unstructured.Unstructured
	// Autoscaler is the cluster's cluster-autoscaler: service account,
	// bindings and Deployment. It needs the <cluster>-kubeconfig secret CAPI
	// writes, so it is applied once the control plane is up.
	Autoscaler []*unstructured.Unstructured
	// ControlPlane names the control plane object commands look up.
	ControlPlane string
	// Pools are the worker pools, in lab.yaml's order, with the names of
	// their MachineDeployments.
	Pools []PoolRender
}

// Find returns the rendered object of a kind, or nil.
func (r *Rendered) Find(kind, name string) *unstructured.Unstructured {
	for _, o := range append(append([]*unstructured.Unstructured{}, r.Objects...), r.Autoscaler...) {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			return o
		}
	}
	return nil
}

// Names of a cluster's objects. Machine templates are immutable, so their
// names carry the size and a hash of their spec: any change makes a new
// template that the MachineDeployment or control plane then rolls to.
func controlPlaneName(cluster string) string { return cluster + "-control-plane" }

// KubeconfigSecret is the secret CAPI writes with the cluster's admin kubeconfig.
func KubeconfigSecret(cluster string) string { return cluster + "-kubeconfig" }

// Namespace is where a cluster's objects live: each cluster has its own.
func Namespace(cluster string) string { return cluster }

// Render builds the objects of one cluster of the lab. The lab must be
// defaulted and valid (config.Load does both).
func Render(in Input) (*Rendered, error) {
	c, err := in.Lab.Cluster(in.Cluster)
	if err != nil {
		return nil, err
	}
	r := &renderer{in: in, c: c, ns: Namespace(c.Name)}
	if c.Kamaji() {
		if err := r.setHypervisor(); err != nil {
			return nil, err
		}
		return r.renderTenant()
	}
	return r.render()
}

type renderer struct {
	in  Input
	c   *config.Cluster
	ns  string
	h   *config.Hypervisor // the cluster's: the control plane's
	px  *config.Proxmox    // h's, when it is a Proxmox one
	out []*unstructured.Unstructured
	// keys are the owner's public keys, read once.
	keys []string
	// libvirt is what the cluster's libvirt pools share: their
	// LibvirtClusters by name, and the hosts' credentials Secrets.
	libvirt libvirtObjects
}

// PoolRender is one rendered worker pool.
type PoolRender struct {
	Name              string
	MachineDeployment string
	// Kind is the infrastructure of its machines: ProxmoxMachineTemplate
	// or LibvirtMachineTemplate.
	Kind        string
	Hypervisors []string
	Autoscaled  bool
	Min, Max    int
}

// setHypervisor finds the cluster's hypervisor, and checks there are keys
// for its nodes.
func (r *renderer) setHypervisor() error {
	c := r.c
	h, err := r.in.Lab.Hypervisor(c.Hypervisor)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	// Validation refuses this already; the rule is config's.
	if why := config.WhyNoClustersOn(h); why != "" {
		return fmt.Errorf("cluster %s: %s", c.Name, why)
	}
	r.h, r.px = h, h.Proxmox
	r.keys, err = r.in.sshKeys("cluster " + c.Name)
	return err
}

func (r *renderer) render() (*Rendered, error) {
	c := r.c
	if err := r.setHypervisor(); err != nil {
		return nil, err
	}
	h := r.h
	nsObj := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: r.ns, Labels: r.labels()}}
	if err := r.add(nsObj); err != nil {
		return nil, err
	}
	var cpTmpl ref
	var cpObj any
	if r.px != nil {
		if err := r.add(r.proxmoxCluster()); err != nil {
			return nil, err
		}
		t, err := r.machineTemplate("control-plane", c.ControlPlane.Size)
		if err != nil {
			return nil, err
		}
		cpTmpl, cpObj = ref{ProxmoxMachineTemplateGVK, t.Metadata.Name}, t
	} else {
		if err := r.add(r.nodePool()); err != nil {
			return nil, err
		}
		if _, err := r.libvirtCluster(c.Name, []string{c.Hypervisor}, true); err != nil {
			return nil, err
		}
		t, err := r.libvirtMachineTemplate("control-plane", c.ControlPlane.Size, c.Template, h, "")
		if err != nil {
			return nil, err
		}
		cpTmpl, cpObj = ref{LibvirtMachineTemplateGVK, t.Name}, t
	}
	kcp := r.controlPlane(cpTmpl)
	var pools []PoolRender
	// In the order lab1 has always had: templates, bootstrap configs, the
	// control plane, the MachineDeployments, the Cluster.
	tmpls, kcts, mds := []any{cpObj}, []any{}, []any{}
	for _, p := range c.Pools {
		pr, err := r.pool(p)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pr.PoolRender)
		tmpls, kcts, mds = append(tmpls, pr.template), append(kcts, pr.kct), append(mds, pr.md)
	}
	for _, o := range slices.Concat(tmpls, kcts, []any{kcp}, mds, []any{r.cluster()}) {
		if err := r.add(o); err != nil {
			return nil, err
		}
	}
	return r.finish(kcp.Name, pools)
}

// finish takes the objects rendered so far as the cluster's, renders its
// autoscaler, and returns both.
func (r *renderer) finish(controlPlane string, pools []PoolRender) (*Rendered, error) {
	// The hosts' credentials go right after the Namespace (the first
	// object), before the LibvirtClusters that name them.
	objs := r.out
	r.out = nil
	for _, s := range r.libvirt.secrets {
		if err := r.add(s); err != nil {
			return nil, err
		}
	}
	objs = slices.Concat(objs[:1], r.out, objs[1:])
	r.out = nil
	if err := r.autoscaler(); err != nil {
		return nil, err
	}
	return &Rendered{
		Name: r.c.Name, Namespace: r.ns, Objects: objs, Autoscaler: r.out,
		ControlPlane: controlPlane, Pools: pools,
	}, nil
}

// ref names a machine template of a kind.
type ref struct {
	gvk  schema.GroupVersionKind
	name string
}

func (t ref) contractRef() clusterv1.ContractVersionedObjectReference {
	return clusterv1.ContractVersionedObjectReference{APIGroup: t.gvk.Group, Kind: t.gvk.Kind, Name: t.name}
}

// renderedPool is a pool with its objects, not added yet.
type renderedPool struct {
	PoolRender
	template, kct, md any
}

// pool renders one worker pool: its machine template (on Proxmox or on
// libvirt hosts), its KubeadmConfigTemplate and its MachineDeployment.
func (r *renderer) pool(p config.Pool) (renderedPool, error) {
	c := r.c
	pr := renderedPool{}
	pr.PoolRender = PoolRender{Name: p.Name, MachineDeployment: PoolMachineDeploymentName(c.Name, p.Name), Hypervisors: p.Hypervisors,
		Autoscaled: p.Autoscaled(), Min: p.Min, Max: p.Max}
	role := "pool-" + p.Name
	if p.Name == config.DefaultPool {
		role = "worker" // the names lab1 has always had
	}
	first, err := r.in.Lab.Hypervisor(p.Hypervisors[0])
	if err != nil {
		return pr, fmt.Errorf("cluster %s: pool %s: %w", c.Name, p.Name, err)
	}
	var tmpl ref
	libvirt := first.Proxmox == nil
	if libvirt {
		// The cluster's own LibvirtCluster when the pool is on its hosts;
		// else one of the pool's, which the machines find through the
		// template's annotation (the Cluster does not reference it).
		lc := c.Name
		if r.px != nil || !slices.Equal(p.Hypervisors, []string{c.Hypervisor}) {
			if lc, err = r.libvirtCluster(c.Name+"-"+p.Name, p.Hypervisors, false); err != nil {
				return pr, err
			}
		} else {
			lc = ""
		}
		t, err := r.libvirtMachineTemplate(role, p.Size, c.PoolTemplate(p), first, lc)
		if err != nil {
			return pr, err
		}
		tmpl, pr.template = ref{LibvirtMachineTemplateGVK, t.Name}, t
	} else {
		t, err := r.machineTemplate(role, p.Size)
		if err != nil {
			return pr, err
		}
		tmpl, pr.template = ref{ProxmoxMachineTemplateGVK, t.Metadata.Name}, t
	}
	pr.Kind = tmpl.gvk.Kind
	kct := r.kubeadmConfigTemplate(p, libvirt)
	kctName, err := hashName(c.Name+"-"+role, "", kct.Spec)
	if err != nil {
		return pr, err
	}
	kct.Name = kctName
	md, err := r.machineDeployment(p, tmpl, kct.Name, libvirt)
	if err != nil {
		return pr, err
	}
	pr.kct, pr.md = kct, md
	return pr, nil
}

// add converts a typed object to unstructured and keeps it.
func (r *renderer) add(obj any) error { return appendObject(&r.out, obj) }

// appendObject converts a typed object to unstructured and appends it.
func appendObject(out *[]*unstructured.Unstructured, obj any) error {
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	*out = append(*out, u)
	return nil
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	// Through JSON rather than the reflection converter, so plain structs
	// (the CAPMOX types) and omitzero fields come out alike.
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("rendering %T: %w", obj, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("rendering %T: %w", obj, err)
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	if spec, ok := u.Object["spec"].(map[string]any); ok && len(spec) == 0 {
		delete(u.Object, "spec")
	}
	return u, nil
}

func (r *renderer) labels() map[string]string {
	return map[string]string{
		clusterv1.ClusterNameLabel: r.c.Name,
		LabelManagedBy:             ManagedBy,
		LabelLab:                   r.in.Lab.Metadata.Name,
	}
}

func (r *renderer) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: r.labels()}
}

func (r *renderer) cluster() *clusterv1.Cluster {
	c := r.c
	return &clusterv1.Cluster{
		TypeMeta:   typeMeta(ClusterGVK),
		ObjectMeta: r.meta(c.Name),
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{c.PodCIDR}},
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{c.ServiceCIDR}},
			},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: KubeadmControlPlaneGVK.Group, Kind: KubeadmControlPlaneGVK.Kind, Name: controlPlaneName(c.Name),
			},
			InfrastructureRef: r.infrastructureRef(),
		},
	}
}

// infrastructureRef is the cluster's ProxmoxCluster or LibvirtCluster,
// where its control plane runs.
func (r *renderer) infrastructureRef() clusterv1.ContractVersionedObjectReference {
	gvk := ProxmoxClusterGVK
	if r.px == nil {
		gvk = LibvirtClusterGVK
	}
	return clusterv1.ContractVersionedObjectReference{APIGroup: gvk.Group, Kind: gvk.Kind, Name: r.c.Name}
}

func (r *renderer) proxmoxCluster() *proxmoxCluster {
	c, n := r.c, r.in.Lab.Network
	pfx := netip.MustParsePrefix(n.CIDR) // validated by config
	return &proxmoxCluster{
		APIVersion: ProxmoxClusterGVK.GroupVersion().String(), Kind: ProxmoxClusterGVK.Kind,
		Metadata: objectMeta{Name: c.Name, Namespace: r.ns, Labels: r.labels()},
		Spec: proxmoxClusterSpec{
			ControlPlaneEndpoint: apiEndpoint{Host: c.ControlPlane.Endpoint, Port: APIServerPort},
			IPv4Config:           ipConfig{Addresses: []string{strings.ReplaceAll(c.NodeIPRange, " ", "")}, Gateway: n.Gateway, Prefix: int32(pfx.Bits())},
			DNSServers:           n.DNS,
			AllowedNodes:         r.allowedNodes(),
			SchedulerHints:       schedulerHints{MemoryAdjustment: int64(c.MemoryAdjustment)},
		},
	}
}

// allowedNodes are the cluster's allowedNodes, else every node of its
// Proxmox endpoint (config's rule).
func (r *renderer) allowedNodes() []string { return r.in.Lab.AllowedNodes(r.c) }

// node is the first allowed node: its bridge and storage are the
// cluster's (config's rule, which validation has checked).
func (r *renderer) node() (config.PVENode, error) {
	n, err := r.in.Lab.ClusterNode(r.c)
	if err != nil {
		return config.PVENode{}, fmt.Errorf("cluster %s: %w", r.c.Name, err)
	}
	return n, nil
}

// cloneNodes are the nodes CAPMOX may clone the cluster's machines onto:
// the one that holds the template. CAPMOX v0.9.0 clones from the
// template's node (templateSelector: the one template in the whole PVE
// cluster with those tags, pkg/proxmox/goproxmox FindVMTemplateByTags;
// templateID: sourceNode) to the node its scheduler picks round-robin from
// the machine's, else the ProxmoxCluster's, allowedNodes
// (internal/service/scheduler ScheduleVM, vmservice createVM's Target).
// PVE clones onto another node only from shared storage (the clone API's
// target: "Only allowed if the original VM is on shared storage"), and
// the lab's templates sit on node-local local-lvm, so with two allowed
// nodes every second machine, the first control plane included, never
// got a VM.
// Config validation keeps the template's node among the cluster's
// allowed nodes.
func (r *renderer) cloneNodes() []string {
	node := r.c.Template.SourceNode
	if r.c.Template.TemplateID == 0 {
		if img, err := r.in.Lab.Image(r.c.Template.Image); err == nil {
			node = img.Node
		}
	}
	if node == "" {
		return r.c.AllowedNodes
	}
	return []string{node}
}

// machineTemplate renders a ProxmoxMachineTemplate named
// <cluster>-<role>-<memory>-<hash>, e.g. lab1-worker-2g-1a2b3c4d.
func (r *renderer) machineTemplate(role string, size config.Size) (*proxmoxMachineTemplate, error) {
	node, err := r.node()
	if err != nil {
		return nil, err
	}
	mem, disk, err := r.quantities(role, size)
	if err != nil {
		return nil, err
	}
	spec := proxmoxMachineSpec{
		AllowedNodes: r.cloneNodes(),
		Full:         true,
		Storage:      node.Storage,
		NumSockets:   1,
		NumCores:     int32(size.CPUs),
		MemoryMiB:    int32(mem.Value() >> 20),
	}
	spec.Disks.BootVolume.Disk = bootDisk
	spec.Disks.BootVolume.SizeGB = int32((disk.Value() + 1<<30 - 1) >> 30)
	dev := networkDevice{Name: "net0", Bridge: node.Bridge, Model: "virtio", DefaultIPv4: true}
	if v := r.in.Lab.Network.VLAN; v > 0 {
		dev.VLAN = int32(v)
	}
	spec.Network.NetworkDevices = []networkDevice{dev}
	if vr := r.px.VMIDRange; vr != nil {
		spec.VMIDRange = &vmIDRange{Start: int64(vr.Start), End: int64(vr.End)}
	}
	switch t := r.c.Template; {
	case t.TemplateID != 0:
		spec.SourceNode = t.SourceNode
		spec.TemplateID = ptr.To(int32(t.TemplateID))
	default:
		img, err := r.in.Lab.Image(t.Image)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: template.image %q is not under images; add it or set template.templateID with template.sourceNode", r.c.Name, t.Image)
		}
		spec.TemplateSelector = &templateSelector{MatchTags: img.TemplateTags()}
	}
	name, err := hashName(r.c.Name+"-"+role, memTag(mem), spec)
	if err != nil {
		return nil, err
	}
	t := &proxmoxMachineTemplate{APIVersion: ProxmoxMachineTemplateGVK.GroupVersion().String(), Kind: ProxmoxMachineTemplateGVK.Kind,
		Metadata: objectMeta{Name: name, Namespace: r.ns, Labels: r.labels()}}
	t.Spec.Template.Spec = spec
	return t, nil
}

// quantities are a machine size's memory and disk.
func (r *renderer) quantities(role string, size config.Size) (mem, disk resource.Quantity, err error) {
	if mem, err = resource.ParseQuantity(size.Memory); err != nil {
		return mem, disk, fmt.Errorf("cluster %s: %s memory %q: %w", r.c.Name, role, size.Memory, err)
	}
	if disk, err = resource.ParseQuantity(size.Disk); err != nil {
		return mem, disk, fmt.Errorf("cluster %s: %s disk %q: %w", r.c.Name, role, size.Disk, err)
	}
	return mem, disk, nil
}

// memTag writes memory for a name: 2g for whole GiB, else 1536m.
func memTag(q resource.Quantity) string {
	if b := q.Value(); b%(1<<30) == 0 {
		return strconv.FormatInt(b>>30, 10) + "g"
	}
	return strconv.FormatInt(q.Value()>>20, 10) + "m"
}

// hashName is prefix[-tag]-<8 hex of the spec's JSON>.
func hashName(prefix, tag string, spec any) (string, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", prefix, err)
	}
	sum := sha256.Sum256(data)
	if tag != "" {
		prefix += "-" + tag
	}
	return prefix + "-" + hex.EncodeToString(sum[:4]), nil
}

// users is the login user on every node, with the owner's SSH keys.
func (r *renderer) users() []bootstrapv1.User { return users(r.in.Lab, r.keys) }

func users(lab *config.Lab, keys []string) []bootstrapv1.User {
	return []bootstrapv1.User{{
		Name:              lab.Management.User,
		Sudo:              "ALL=(ALL) NOPASSWD:ALL",
		SSHAuthorizedKeys: keys,
	}}
}

// providerID sets kubelet's provider-id to what the Machine's
// infrastructure says, read by cloud-init from the meta-data the provider
// writes: proxmox://<VM BIOS UUID> from CAPMOX's instance-id, or labctl's
// libvirt provider's libvirt://<host>/<domain uuid> from its provider-id
// (cloud-init gives meta-data keys with '-' as '_' to jinja).
func providerID(libvirt bool) bootstrapv1.Arg {
	if libvirt {
		return bootstrapv1.Arg{Name: "provider-id", Value: ptr.To(libvirtProviderIDTemplate)}
	}
	return bootstrapv1.Arg{Name: "provider-id", Value: ptr.To(providerIDTemplate)}
}

func (r *renderer) controlPlane(template ref) *controlplanev1.KubeadmControlPlane {
	c := r.c
	reg := bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: []bootstrapv1.Arg{providerID(r.px == nil)}}
	return &controlplanev1.KubeadmControlPlane{
		TypeMeta:   typeMeta(KubeadmControlPlaneGVK),
		ObjectMeta: r.meta(controlPlaneName(c.Name)),
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To(int32(c.ControlPlane.Replicas)),
			Version:  c.KubernetesVersion,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{
				Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
					InfrastructureRef: template.contractRef(),
				},
			},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: reg},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: reg},
				Files: []bootstrapv1.File{{
					Path: kubeVipManifestPath, Owner: "root:root", Permissions: "0644",
					Content: kubeVipManifest(c.ControlPlane.Endpoint, r.in.Pins.KubeVip),
				}},
				PreKubeadmCommands:  []string{kubeVipUseSuperAdmin},
				PostKubeadmCommands: []string{kubeVipUseAdmin},
				Users:               r.users(),
			},
		},
	}
}

func (r *renderer) kubeadmConfigTemplate(p config.Pool, libvirt bool) *bootstrapv1.KubeadmConfigTemplate {
	args := []bootstrapv1.Arg{providerID(libvirt)}
	if labels := workerLabels(p); len(labels) > 0 {
		args = append(args, bootstrapv1.Arg{Name: "node-labels", Value: ptr.To(strings.Join(labels, ","))})
	}
	// Every worker registers with Cilium's startup taint
	// node.cilium.io/agent-not-ready=true:NoExecute (Cilium's docs,
	// "Considerations on node pool taints and unmanaged pods"). The
	// cilium-operator, not the agent, lifts it once the Cilium agent Pod
	// on that node is Ready (Cilium 1.18.4 operator/watchers/node_taint.go
	// checkAndMarkNode and nodeHasCiliumPod; --remove-cilium-node-taints,
	// the chart's operator.removeNodeTaints, on by default), so no pod
	// lands before the node's CNI is up, and the autoscaler's --startup-taint
	// does not count it against the new node. The capacity annotation
	// keeps only the pool's own taints.
	taints := []corev1.Taint{startupTaint()}
	for _, t := range p.Taints {
		taints = append(taints, parseTaint(t))
	}
	reg := bootstrapv1.NodeRegistrationOptions{KubeletExtraArgs: args, Taints: &taints}
	return &bootstrapv1.KubeadmConfigTemplate{
		TypeMeta:   typeMeta(KubeadmConfigTemplateGVK),
		ObjectMeta: r.meta(""), // named by hash
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
			Spec: bootstrapv1.KubeadmConfigSpec{
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: reg},
				Users:             r.users(),
			},
		}},
	}
}

// startupTaint is Cilium's taint every worker registers with.
func startupTaint() corev1.Taint {
	return corev1.Taint{Key: StartupTaint, Value: "true", Effect: corev1.TaintEffectNoExecute}
}

// workerLabels are the pool label plus the pool's labels, sorted.
func workerLabels(p config.Pool) []string {
	labels := append([]string{LabelPool + "=" + p.Name}, p.Labels...)
	sort.Strings(labels)
	return labels
}

func parseTaint(s string) corev1.Taint {
	kv, effect, _ := strings.Cut(s, ":")
	k, v, _ := strings.Cut(kv, "=")
	return corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)}
}

func (r *renderer) machineDeployment(p config.Pool, template ref, bootstrap string, libvirt bool) (*clusterv1.MachineDeployment, error) {
	c := r.c
	name := PoolMachineDeploymentName(c.Name, p.Name)
	sel := map[string]string{clusterv1.ClusterNameLabel: c.Name, clusterv1.MachineDeploymentNameLabel: name}
	md := &clusterv1.MachineDeployment{
		TypeMeta:   typeMeta(MachineDeploymentGVK),
		ObjectMeta: r.meta(name),
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: c.Name,
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				},
			}},
			Selector: metav1.LabelSelector{MatchLabels: sel},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: sel},
				Spec: clusterv1.MachineSpec{
					ClusterName: c.Name,
					Version:     c.KubernetesVersion,
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: KubeadmConfigTemplateGVK.Group, Kind: KubeadmConfigTemplateGVK.Kind, Name: bootstrap,
					}},
					InfrastructureRef: template.contractRef(),
				},
			},
		},
	}
	if !p.Autoscaled() {
		// A fixed pool: labctl owns the count. An autoscaled one never gets
		// spec.replicas from labctl, so a re-apply cannot undo a scale.
		md.Spec.Replicas = ptr.To(int32(p.Min))
		return md, nil
	}
	ann, err := r.capacity(p, libvirt)
	if err != nil {
		return nil, err
	}
	ann[AnnotationMinSize] = strconv.Itoa(p.Min)
	ann[AnnotationMaxSize] = strconv.Itoa(p.Max)
	md.Annotations = ann
	return md, nil
}

// capacity is what cluster-autoscaler needs to build a worker from nothing
// (scale from zero): CAPMOX publishes no status.capacity. cluster-autoscaler
// 1.35 parses cpu and memory with resource.ParseQuantity and makes them the
// template node's capacity and allocatable alike
// (cloudprovider/clusterapi clusterapi_utils.go parseKey,
// clusterapi_nodegroup.go TemplateNodeInfo), so they carry what the node
// will offer pods, not the VM's size. A pool on libvirt hosts gets no
// size annotations: labctl's provider publishes the machine's size in its
// LibvirtMachineTemplate's status.capacity, where the autoscaler reads it
// (clusterapi_unstructured.go InstanceCapacity; an annotation would win
// over it). Labels and taints have no place there, so every pool carries
// those.
func (r *renderer) capacity(p config.Pool, libvirt bool) (map[string]string, error) {
	ann := map[string]string{AnnotationLabels: strings.Join(workerLabels(p), ",")}
	if len(p.Taints) > 0 {
		ann[AnnotationTaints] = strings.Join(p.Taints, ",")
	}
	if libvirt {
		return ann, nil
	}
	cpus, mem, err := p.Size.Allocatable()
	if err != nil {
		return nil, fmt.Errorf("cluster %s: pool %s: size.%w", r.c.Name, p.Name, err)
	}
	ann[AnnotationCPU] = strconv.Itoa(cpus)
	ann[AnnotationMemory] = mem.String()
	ann[AnnotationMaxPods] = strconv.Itoa(kubeletMaxPods)
	return ann, nil
}
