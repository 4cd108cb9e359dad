package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// defaultRetry is how soon a machine waiting on something no watch
// reports (a host coming back, room freed, an image uploaded, an address
// freed in the pool) is looked at again.
const defaultRetry = 30 * time.Second

// MachineReconciler makes and removes the domain of each LibvirtMachine.
// It keeps no state of its own: every step first reads what exists, in
// the API and on the hosts, so a reconcile cut off anywhere converges
// when it runs again.
type MachineReconciler struct {
	Client ctrl.Client
	// Reader reads Secrets uncached (bootstrap data, credentials).
	Reader ctrl.Reader
	Hosts  Hosts
	// Retry is how soon a machine that waits on its hosts or its pool is
	// looked at again; zero means 30s.
	Retry time.Duration
	// Step, when set, is called after each step that changed something
	// (steps below); an error ends the reconcile there, as a crash
	// would. Tests cut reconciles off with it.
	Step func(step string) error
}

// The steps a reconcile takes, in order.
const (
	StepClaimCreated   = "address claimed"
	StepPlaced         = "host recorded"
	StepDefined        = "domain defined"
	StepStarted        = "domain started"
	StepProviderID     = "providerID set"
	StepDomainDeleted  = "domain deleted"
	StepClaimDeleted   = "claim deleted"
	StepFinalizerAdded = "finalizer added"
)

func (r *MachineReconciler) step(name string) error {
	if r.Step == nil {
		return nil
	}
	return r.Step(name)
}

func (r *MachineReconciler) retry() time.Duration {
	if r.Retry > 0 {
		return r.Retry
	}
	return defaultRetry
}

// Reconcile follows Cluster API's InfraMachine contract (v1beta2).
func (r *MachineReconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, reterr error) {
	lm := &v1alpha1.LibvirtMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, lm); err != nil {
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	machine, err := ownerMachine(ctx, r.Client, lm)
	if err != nil {
		return reconcile.Result{}, err
	}
	if machine == nil && lm.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // the Machine controller sets the owner
	}
	clusterName := lm.Labels[clusterv1.ClusterNameLabel]
	if machine != nil {
		clusterName = machine.Spec.ClusterName
	}
	cluster, lc, err := clusterOf(ctx, r.Client, lm.Namespace, clusterName, lm.Annotations[v1alpha1.ClusterAnnotation])
	if err != nil {
		return reconcile.Result{}, err
	}
	if cluster != nil && (ptr.Deref(cluster.Spec.Paused, false) || hasPaused(lm)) {
		return reconcile.Result{}, nil
	}

	st := lm.Status.DeepCopy()
	defer func() {
		if err := r.patchStatus(ctx, lm, st); err != nil {
			reterr = errors.Join(reterr, err)
		}
	}()
	m := &machineScope{lm: lm, machine: machine, cluster: cluster, lc: lc, st: st, lab: lm.Namespace + "/" + clusterName}
	if !lm.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, m)
	}
	if !controllerutil.ContainsFinalizer(lm, v1alpha1.MachineFinalizer) {
		if err := r.patch(ctx, lm, func() { controllerutil.AddFinalizer(lm, v1alpha1.MachineFinalizer) }); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.step(StepFinalizerAdded); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.reconcileNormal(ctx, m)
}

// machineScope is what one reconcile works on; st is the status it
// writes back.
type machineScope struct {
	lm      *v1alpha1.LibvirtMachine
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
	lc      *v1alpha1.LibvirtCluster
	st      *v1alpha1.LibvirtMachineStatus
	lab     string
}

func (m *machineScope) condition(ok bool, reason, format string, args ...any) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	msg := fmt.Sprintf(format, args...)
	for _, t := range []string{v1alpha1.VirtualMachineProvisionedCondition, v1alpha1.ReadyCondition} {
		meta.SetStatusCondition(&m.st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: m.lm.Generation,
		})
	}
}

func (r *MachineReconciler) reconcileNormal(ctx context.Context, m *machineScope) (reconcile.Result, error) {
	if m.lc == nil {
		if n := m.lm.Annotations[v1alpha1.ClusterAnnotation]; n != "" {
			m.condition(false, v1alpha1.WaitingForClusterInfrastructureReason, "LibvirtCluster %s (annotation %s) does not exist yet", n, v1alpha1.ClusterAnnotation)
			return reconcile.Result{}, nil
		}
		m.condition(false, v1alpha1.WaitingForClusterInfrastructureReason, "the Cluster's LibvirtCluster does not exist yet")
		return reconcile.Result{}, nil
	}
	// A LibvirtCluster the Cluster does not reference reports its own
	// provisioned flag; the Cluster's infrastructure must be up as well.
	if m.cluster == nil || !ptr.Deref(m.cluster.Status.Initialization.InfrastructureProvisioned, false) || !ptr.Deref(m.lc.Status.Initialization.Provisioned, false) {
		m.condition(false, v1alpha1.WaitingForClusterInfrastructureReason, "waiting for LibvirtCluster %s to be provisioned", m.lc.Name)
		return reconcile.Result{}, nil
	}
	if m.machine.Spec.Bootstrap.DataSecretName == nil {
		m.condition(false, v1alpha1.WaitingForBootstrapDataReason, "waiting for the Machine's bootstrap data (spec.bootstrap.dataSecretName)")
		return reconcile.Result{}, nil
	}
	name, err := domainName(m.lm.Name)
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "%v", err)
		return reconcile.Result{}, nil
	}

	addr, wait, err := r.address(ctx, m)
	if err != nil {
		return reconcile.Result{}, err
	}
	if wait {
		return reconcile.Result{RequeueAfter: r.retry()}, nil
	}
	userData, err := r.bootstrapData(ctx, m)
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "%v", err)
		return reconcile.Result{}, nil
	}

	hosts := r.Hosts.connectAll(ctx, m.lc, m.lm.Spec.Image.Pool)
	defer closeAll(hosts)
	h, vm, err := r.findDomain(ctx, m, hosts, name)
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "%v", err)
		return reconcile.Result{RequeueAfter: r.retry()}, nil
	}
	if h == nil {
		if ptr.Deref(m.st.Initialization.Provisioned, false) {
			m.condition(false, v1alpha1.VirtualMachineNotFoundReason, "domain %s is gone from every host that answers: it was removed outside Cluster API; delete the Machine to replace it", name)
			return reconcile.Result{RequeueAfter: r.retry()}, nil
		}
		if fd := m.st.FailureDomain; fd != "" {
			// The domain may be on the recorded host: never place
			// elsewhere while it cannot be asked.
			for _, o := range hosts {
				if o.spec.Name == fd && o.err != nil {
					m.condition(false, v1alpha1.HostUnreachableReason, "host %s, where this machine was placed, does not answer: %v", fd, o.err)
					return reconcile.Result{RequeueAfter: r.retry()}, nil
				}
			}
		}
		var img hypervisor.Image
		var why string
		h, img, why = r.place(ctx, m, hosts)
		if h == nil {
			m.condition(false, reasonOf(why), "%s", strings.TrimPrefix(why, reasonOf(why)+": "))
			return reconcile.Result{RequeueAfter: r.retry()}, nil
		}
		if m.st.FailureDomain != h.spec.Name {
			m.st.FailureDomain = h.spec.Name
			if err := r.patchStatus(ctx, m.lm, m.st); err != nil {
				return reconcile.Result{}, err
			}
		}
		if err := r.step(StepPlaced); err != nil {
			return reconcile.Result{}, err
		}
		netcfg, err := cloudinit.NetworkConfig(cloudinit.Static{
			MAC: hypervisor.StableMAC(m.lab, name), Address: addr.prefix, Gateway: addr.gateway, DNS: addr.dns,
		})
		if err != nil {
			m.condition(false, v1alpha1.ProvisioningFailedReason, "address %s from IPAddress %s: %v", addr.prefix, addr.from, err)
			return reconcile.Result{}, nil
		}
		spec := hypervisor.VMSpec{
			Lab: m.lab, Name: name, UUID: string(m.lm.UID),
			CPUs: int(m.lm.Spec.CPUs), MemoryMiB: int(m.lm.Spec.MemoryMiB), DiskGiB: int(m.lm.Spec.DiskGiB),
			Image:   img,
			Network: hypervisor.NetworkSpec{MAC: hypervisor.StableMAC(m.lab, name)},
			CloudInit: hypervisor.CloudInit{
				InstanceID: string(m.lm.UID), Hostname: name, UserData: userData, NetworkConfig: netcfg,
				// The kubelet registers the providerID set below (labctl's
				// KubeadmConfigs read it), so the Node matches the Machine.
				ProviderID: ProviderID(h.spec.Name, string(m.lm.UID)),
			},
			Tags: []string{"cluster-api"},
		}
		for _, d := range m.lm.Spec.ExtraDisks {
			spec.ExtraDisksGiB = append(spec.ExtraDisksGiB, int(d.SizeGiB))
		}
		if vm, err = h.d.CreateVM(ctx, spec); err != nil {
			m.condition(false, v1alpha1.ProvisioningFailedReason, "creating domain %s on host %s: %v", name, h.spec.Name, err)
			return reconcile.Result{}, err
		}
		if err := r.step(StepDefined); err != nil {
			return reconcile.Result{}, err
		}
	}
	m.st.FailureDomain = h.spec.Name
	if !vm.Running {
		if err := h.d.StartVM(ctx, vm); err != nil {
			m.condition(false, v1alpha1.ProvisioningFailedReason, "starting domain %s on host %s: %v", name, h.spec.Name, err)
			return reconcile.Result{}, err
		}
		if err := r.step(StepStarted); err != nil {
			return reconcile.Result{}, err
		}
	}
	if id := ProviderID(h.spec.Name, vm.UUID); m.lm.Spec.ProviderID != id {
		if err := r.patch(ctx, m.lm, func() { m.lm.Spec.ProviderID = id }); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.step(StepProviderID); err != nil {
			return reconcile.Result{}, err
		}
	}
	m.st.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: addr.prefix.Addr().String()},
		{Type: clusterv1.MachineHostName, Address: name},
	}
	m.st.Initialization.Provisioned = ptr.To(true)
	m.condition(true, v1alpha1.ProvisionedReason, "domain %s runs on host %s", name, h.spec.Name)
	return reconcile.Result{}, nil
}

// ProviderID is the Node's spec.providerID for a domain on a host.
func ProviderID(host, uuid string) string { return "libvirt://" + host + "/" + uuid }

// domainUUID is the UUID of lm's domain: the one its spec.providerID
// records once the domain exists, else lm's UID, which a new domain gets.
// The providerID comes first because it is spec: clusterctl move (and
// 'labctl mgmt restore') recreate the LibvirtMachine with a new UID but
// the same spec, and the machine must find its domain, not make another
// or leave it behind when deleted.
func domainUUID(lm *v1alpha1.LibvirtMachine) string {
	if rest, ok := strings.CutPrefix(lm.Spec.ProviderID, "libvirt://"); ok {
		if i := strings.LastIndexByte(rest, '/'); i > 0 && i < len(rest)-1 {
			return rest[i+1:]
		}
	}
	return string(lm.UID)
}

// findDomain looks for the machine's domain on every host that answers.
// A domain of that name made for another machine (another UUID) is an
// error: it is never taken over.
func (r *MachineReconciler) findDomain(ctx context.Context, m *machineScope, hosts []*host, name string) (*host, hypervisor.VM, error) {
	for _, h := range hosts {
		if h.d == nil {
			continue
		}
		vm, err := h.d.FindVM(ctx, m.lab, name)
		if errors.Is(err, hypervisor.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, vm, fmt.Errorf("host %s: %w", h.spec.Name, err)
		}
		if want := domainUUID(m.lm); vm.UUID != want {
			return nil, vm, fmt.Errorf("host %s has a domain %s of UUID %s, not this LibvirtMachine's %s: it belongs to another machine; delete it there (virsh undefine) or rename this one", h.spec.Name, name, vm.UUID, want)
		}
		return h, vm, nil
	}
	return nil, hypervisor.VM{}, nil
}

// place picks the host with the most free memory that holds the image
// and has room, within the Machine's failure domain when it names one.
// Free memory is what the host may reserve (its memory times the
// cluster's memoryAdjustment) less the configured memory of every
// defined domain, stopped ones too. With no host, why is
// "<reason>: <message>".
func (r *MachineReconciler) place(ctx context.Context, m *machineScope, hosts []*host) (*host, hypervisor.Image, string) {
	want := int(m.lm.Spec.MemoryMiB)
	adj := int(m.lc.Spec.MemoryAdjustment)
	if adj == 0 {
		adj = 100
	}
	fd := m.machine.Spec.FailureDomain
	if fd != "" && !slices.ContainsFunc(hosts, func(h *host) bool { return h.spec.Name == fd }) {
		return nil, hypervisor.Image{}, fmt.Sprintf("%s: the Machine's failure domain %s is not a host of LibvirtCluster %s", v1alpha1.ProvisioningFailedReason, fd, m.lc.Name)
	}
	var (
		best               *host
		bestImg            hypervisor.Image
		bestFree           int
		unreachable, noImg []string
		full               []string
	)
	for _, h := range hosts {
		if fd != "" && h.spec.Name != fd {
			continue
		}
		if h.err != nil {
			unreachable = append(unreachable, fmt.Sprintf("%s (%v)", h.spec.Name, h.err))
			continue
		}
		img, err := h.d.FindImage(ctx, hypervisor.ImageSpec{FileName: m.lm.Spec.Image.Volume})
		if err != nil {
			noImg = append(noImg, fmt.Sprintf("%s (%v)", h.spec.Name, err))
			continue
		}
		caps, err := h.d.Capacity(ctx)
		if err != nil || len(caps) == 0 {
			unreachable = append(unreachable, fmt.Sprintf("%s (reading its capacity: %v)", h.spec.Name, err))
			continue
		}
		c := caps[0]
		free := c.MemoryMiB*adj/100 - c.ReservedMiB
		if free < want {
			full = append(full, fmt.Sprintf("%s has %d MiB free of %d MiB reservable", h.spec.Name, max(free, 0), c.MemoryMiB*adj/100))
			continue
		}
		if best == nil || free > bestFree {
			best, bestImg, bestFree = h, img, free
		}
	}
	if best != nil {
		return best, bestImg, ""
	}
	within := ""
	if fd != "" {
		within = " in failure domain " + fd
	}
	switch {
	case len(full) > 0:
		return nil, hypervisor.Image{}, fmt.Sprintf("%s: no host%s has the %d MiB of memory this machine needs free: %s", v1alpha1.NoHostWithRoomReason, within, want, strings.Join(full, "; ")) +
			also("unreachable", unreachable) + also("without the image", noImg)
	case len(noImg) > 0:
		return nil, hypervisor.Image{}, fmt.Sprintf("%s: the node image volume %s in pool %s is missing%s: %s; 'labctl image build' uploads it", v1alpha1.ImageMissingReason, m.lm.Spec.Image.Volume, m.lm.Spec.Image.Pool, within, strings.Join(noImg, "; ")) +
			also("unreachable", unreachable)
	}
	return nil, hypervisor.Image{}, fmt.Sprintf("%s: no host%s answers: %s", v1alpha1.HostUnreachableReason, within, strings.Join(unreachable, "; "))
}

func also(what string, hosts []string) string {
	if len(hosts) == 0 {
		return ""
	}
	return "; " + what + ": " + strings.Join(hosts, "; ")
}

// reasonOf is the reason a place message starts with.
func reasonOf(why string) string {
	r, _, _ := strings.Cut(why, ": ")
	return r
}

// staticAddress is the machine's address from its IPAddress.
type staticAddress struct {
	prefix  netip.Prefix
	gateway netip.Addr
	dns     []netip.Addr
	from    string
}

// address claims the machine's address from the cluster's pool (an
// IPAddressClaim named and owned by the LibvirtMachine, as CAPMOX
// claims its) and returns it once the IPAM provider bound one; wait is
// true while it has not.
func (r *MachineReconciler) address(ctx context.Context, m *machineScope) (staticAddress, bool, error) {
	claim := &ipamv1.IPAddressClaim{}
	key := ctrl.ObjectKey{Namespace: m.lm.Namespace, Name: m.lm.Name}
	err := r.Client.Get(ctx, key, claim)
	if apierrors.IsNotFound(err) {
		pool := m.lc.Spec.IPPool
		claim = &ipamv1.IPAddressClaim{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{clusterv1.ClusterNameLabel: m.cluster.Name},
			},
			Spec: ipamv1.IPAddressClaimSpec{
				ClusterName: m.cluster.Name,
				PoolRef:     ipamv1.IPPoolReference{APIGroup: poolGroup(pool), Kind: pool.Kind, Name: pool.Name},
			},
		}
		if err := controllerutil.SetControllerReference(m.lm, claim, r.Client.Scheme()); err != nil {
			return staticAddress{}, false, err
		}
		if err := r.Client.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
			return staticAddress{}, false, fmt.Errorf("creating IPAddressClaim %s: %w", key.Name, err)
		}
		if err := r.step(StepClaimCreated); err != nil {
			return staticAddress{}, false, err
		}
	} else if err != nil {
		return staticAddress{}, false, fmt.Errorf("reading IPAddressClaim %s: %w", key.Name, err)
	}
	if claim.Status.AddressRef.Name == "" {
		if r.poolExhausted(ctx, m, claim) {
			m.condition(false, v1alpha1.IPPoolExhaustedReason, "%s %s has no free address for IPAddressClaim %s", m.lc.Spec.IPPool.Kind, m.lc.Spec.IPPool.Name, claim.Name)
		} else {
			m.condition(false, v1alpha1.WaitingForIPAddressReason, "waiting for the IPAM provider to bind an address to IPAddressClaim %s (%s %s)", claim.Name, m.lc.Spec.IPPool.Kind, m.lc.Spec.IPPool.Name)
		}
		return staticAddress{}, true, nil
	}
	ip := &ipamv1.IPAddress{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: key.Namespace, Name: claim.Status.AddressRef.Name}, ip); err != nil {
		return staticAddress{}, false, fmt.Errorf("reading IPAddress %s of claim %s: %w", claim.Status.AddressRef.Name, claim.Name, err)
	}
	a := staticAddress{from: ip.Name}
	addr, err := netip.ParseAddr(ip.Spec.Address)
	if err != nil || ip.Spec.Prefix == nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "IPAddress %s holds no usable address/prefix (%q, %v)", ip.Name, ip.Spec.Address, ip.Spec.Prefix)
		return a, true, nil
	}
	a.prefix = netip.PrefixFrom(addr, int(*ip.Spec.Prefix))
	if ip.Spec.Gateway != "" {
		if a.gateway, err = netip.ParseAddr(ip.Spec.Gateway); err != nil {
			m.condition(false, v1alpha1.ProvisioningFailedReason, "IPAddress %s: gateway %q: %v", ip.Name, ip.Spec.Gateway, err)
			return a, true, nil
		}
	}
	for _, s := range m.lc.Spec.Network.DNSServers {
		d, err := netip.ParseAddr(s)
		if err != nil {
			m.condition(false, v1alpha1.ProvisioningFailedReason, "LibvirtCluster %s: spec.network.dnsServers: %q is not an IP address", m.lc.Name, s)
			return a, true, nil
		}
		a.dns = append(a.dns, d)
	}
	return a, false, nil
}

func poolGroup(p v1alpha1.IPPoolReference) string {
	if p.APIGroup == "" {
		return ipamv1.GroupVersion.Group
	}
	return p.APIGroup
}

// inClusterPoolVersion is the version in-cluster IPAM v1.0.x serves its
// pools at.
const inClusterPoolVersion = "v1alpha2"

// poolExhausted says whether the claim waits because the pool is full:
// the IPAM provider said so on the claim (Ready False, PoolExhausted, as
// CAPI's IPAM contract asks), or the in-cluster pool's status counts no
// free address (in-cluster IPAM v1.0.3 sets no condition, only
// status.ipAddresses).
func (r *MachineReconciler) poolExhausted(ctx context.Context, m *machineScope, claim *ipamv1.IPAddressClaim) bool {
	if c := meta.FindStatusCondition(claim.Status.Conditions, clusterv1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse && c.Reason == ipamv1.IPAddressClaimReadyPoolExhaustedReason {
		return true
	}
	ref := m.lc.Spec.IPPool
	pool := &unstructured.Unstructured{}
	pool.SetAPIVersion(poolGroup(ref) + "/" + inClusterPoolVersion)
	pool.SetKind(ref.Kind)
	key := ctrl.ObjectKey{Name: ref.Name}
	if ref.Kind == "InClusterIPPool" {
		key.Namespace = m.lm.Namespace
	}
	if err := r.Client.Get(ctx, key, pool); err != nil {
		return false
	}
	free, found, err := unstructured.NestedInt64(pool.Object, "status", "ipAddresses", "free")
	return err == nil && found && free == 0
}

// bootstrapData is the Machine's bootstrap data: cloud-config only.
func (r *MachineReconciler) bootstrapData(ctx context.Context, m *machineScope) ([]byte, error) {
	name := *m.machine.Spec.Bootstrap.DataSecretName
	var s corev1.Secret
	if err := r.Reader.Get(ctx, ctrl.ObjectKey{Namespace: m.lm.Namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading the bootstrap data Secret %s: %w", name, err)
	}
	if f := string(s.Data["format"]); f != "" && f != "cloud-config" {
		return nil, fmt.Errorf("the bootstrap data Secret %s is in format %q; libvirt machines boot cloud-init's NoCloud seed and take cloud-config only", name, f)
	}
	v := s.Data["value"]
	if len(v) == 0 {
		return nil, fmt.Errorf("the bootstrap data Secret %s has no value key", name)
	}
	return v, nil
}

// reconcileDelete removes the domain and its volumes from whichever host
// holds it, then releases the address. While the host the machine was
// placed on does not answer, the finalizer stays: the domain may still be
// there.
func (r *MachineReconciler) reconcileDelete(ctx context.Context, m *machineScope) (reconcile.Result, error) {
	m.condition(false, v1alpha1.DeletingReason, "deleting the domain")
	if !controllerutil.ContainsFinalizer(m.lm, v1alpha1.MachineFinalizer) {
		return reconcile.Result{}, nil
	}
	name, nameErr := domainName(m.lm.Name)
	placed := m.st.FailureDomain != "" || ptr.Deref(m.st.Initialization.Provisioned, false)
	if m.lc == nil && placed {
		m.condition(false, v1alpha1.DeletingReason, "the LibvirtCluster of cluster %s is gone, so the hosts of domain %s are unknown; recreate it to let the domain be removed", m.lm.Labels[clusterv1.ClusterNameLabel], name)
		return reconcile.Result{RequeueAfter: r.retry()}, nil
	}
	if m.lc != nil && nameErr == nil {
		hosts := r.Hosts.connectAll(ctx, m.lc, m.lm.Spec.Image.Pool)
		defer closeAll(hosts)
		for _, h := range hosts {
			if h.err != nil {
				if h.spec.Name == m.st.FailureDomain {
					m.condition(false, v1alpha1.HostUnreachableReason, "cannot delete domain %s: host %s does not answer: %v", name, h.spec.Name, h.err)
					return reconcile.Result{RequeueAfter: r.retry()}, nil
				}
				continue
			}
			vm, err := h.d.FindVM(ctx, m.lab, name)
			if errors.Is(err, hypervisor.ErrNotFound) {
				// A create cut off before its define leaves volumes no
				// domain records.
				if err := h.d.RemoveLeftovers(ctx, name); err != nil {
					m.condition(false, v1alpha1.DeletingReason, "host %s: %v", h.spec.Name, err)
					return reconcile.Result{}, err
				}
				continue
			}
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("host %s: %w", h.spec.Name, err)
			}
			if vm.UUID != domainUUID(m.lm) {
				continue // another machine's
			}
			if err := h.d.DeleteVM(ctx, vm); err != nil {
				m.condition(false, v1alpha1.DeletingReason, "deleting domain %s on host %s: %v", name, h.spec.Name, err)
				return reconcile.Result{}, err
			}
			if err := r.step(StepDomainDeleted); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: m.lm.Namespace, Name: m.lm.Name}}
	if err := r.Client.Delete(ctx, claim); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("releasing IPAddressClaim %s: %w", claim.Name, err)
	} else if err == nil {
		if err := r.step(StepClaimDeleted); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, r.patch(ctx, m.lm, func() { controllerutil.RemoveFinalizer(m.lm, v1alpha1.MachineFinalizer) })
}

// patch changes lm's metadata or spec through mutate, as a merge patch.
func (r *MachineReconciler) patch(ctx context.Context, lm *v1alpha1.LibvirtMachine, mutate func()) error {
	st := lm.Status.DeepCopy()
	base := lm.DeepCopy()
	mutate()
	if err := r.Client.Patch(ctx, lm, ctrl.MergeFrom(base)); err != nil {
		return fmt.Errorf("patching LibvirtMachine %s: %w", lm.Name, err)
	}
	lm.Status = *st // the status is written on its own
	return nil
}

// patchStatus writes st as lm's status when it differs.
func (r *MachineReconciler) patchStatus(ctx context.Context, lm *v1alpha1.LibvirtMachine, st *v1alpha1.LibvirtMachineStatus) error {
	if lm.DeletionTimestamp != nil && !controllerutil.ContainsFinalizer(lm, v1alpha1.MachineFinalizer) {
		return nil // gone once the finalizer went
	}
	base := lm.DeepCopy()
	lm.Status = *st.DeepCopy()
	if err := r.Client.Status().Patch(ctx, lm, ctrl.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the status of LibvirtMachine %s: %w", lm.Name, err)
	}
	return nil
}

// domainName is the domain (and host) name of a LibvirtMachine: its own
// name, which Cluster API makes a DNS label.
func domainName(name string) (string, error) {
	if !dnsLabel(name) {
		return "", fmt.Errorf("LibvirtMachine name %q is not a DNS label (at most 63 of a-z, 0-9 and '-'), which a domain and host name must be; shorten the MachineDeployment's name", name)
	}
	return name, nil
}

func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
