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
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
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
	// Reader reads past the cache: Secrets (bootstrap data, credentials),
	// and what a reconcile cut off just before wrote, which the cache may
	// not show yet.
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
	machine, err := util.GetOwnerMachine(ctx, r.Client, lm.ObjectMeta)
	switch {
	case apierrors.IsNotFound(err):
		machine = nil // gone: a deletion goes on without it
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading the Machine of LibvirtMachine %s: %w", lm.Name, err)
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
	if cluster != nil && annotations.IsPaused(cluster, lm) {
		return reconcile.Result{}, nil
	}

	m, err := newMachineScope(r.Client, lm)
	if err != nil {
		return reconcile.Result{}, err
	}
	m.machine, m.cluster, m.lc, m.lab = machine, cluster, lc, lm.Namespace+"/"+clusterName
	defer func() {
		m.closeHosts()
		if err := m.close(ctx); err != nil {
			reterr = errors.Join(reterr, err)
		}
	}()
	if !lm.DeletionTimestamp.IsZero() {
		return r.run(ctx, m, r.deletePhases())
	}
	if controllerutil.AddFinalizer(lm, v1alpha1.MachineFinalizer) {
		if err := m.patch(ctx); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.step(StepFinalizerAdded); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.run(ctx, m, r.normalPhases())
}

// A phase is one step of a reconcile, as CAPMOX's ReconcileVM chains
// them (internal/service/vmservice/vm.go). It looks at what exists first,
// acts only when something is missing, and sets the condition's reason
// when it stops the reconcile. requeue stops it there, to be looked at
// again after Retry: it waits for something (an address, a host, room) or
// failed in a way a retry may mend. An error stops it too, and is
// retried with back-off.
type phase func(ctx context.Context, m *machineScope) (requeue bool, err error)

// normalPhases make a LibvirtMachine's domain and report it.
func (r *MachineReconciler) normalPhases() []phase {
	return []phase{
		r.reconcileClusterInfrastructure, // WaitingForClusterInfrastructure
		r.reconcileBootstrapReady,        // WaitingForBootstrapData
		r.reconcileName,                  // ProvisioningFailed
		r.reconcileAddress,               // WaitingForIPAddress, IPPoolExhausted, ProvisioningFailed
		r.reconcileBootstrapData,         // ProvisioningFailed
		r.reconcileHosts,                 // ProvisioningFailed, VirtualMachineNotFound, HostUnreachable
		r.reconcilePlacement,             // NoHostWithRoom, ImageMissing, HostUnreachable
		r.reconcileDomain,                // ProvisioningFailed
		r.reconcilePowerState,            // ProvisioningFailed
		r.reconcileProviderID,            // none: it writes spec.providerID
		r.reconcileProvisioned,           // Provisioned (True)
	}
}

// deletePhases remove the domain, then the address, then the finalizer.
func (r *MachineReconciler) deletePhases() []phase {
	return []phase{r.deleteDomain, r.releaseAddress, r.removeFinalizer}
}

// run runs the phases in order until one stops.
func (r *MachineReconciler) run(ctx context.Context, m *machineScope, phases []phase) (reconcile.Result, error) {
	for _, p := range phases {
		requeue, err := p(ctx, m)
		if err != nil {
			return reconcile.Result{}, err
		}
		if requeue {
			return reconcile.Result{RequeueAfter: r.retry()}, nil
		}
	}
	return reconcile.Result{}, nil
}

// reconcileClusterInfrastructure waits for the LibvirtCluster, and for
// the Cluster's infrastructure: a LibvirtCluster the Cluster does not
// reference reports its own provisioned flag.
func (r *MachineReconciler) reconcileClusterInfrastructure(_ context.Context, m *machineScope) (bool, error) {
	if m.lc == nil {
		if n := m.lm.Annotations[v1alpha1.ClusterAnnotation]; n != "" {
			m.condition(false, v1alpha1.WaitingForClusterInfrastructureReason, "LibvirtCluster %s (annotation %s) does not exist yet", n, v1alpha1.ClusterAnnotation)
			return true, nil
		}
		m.condition(false, v1alpha1.WaitingForClusterInfrastructureReason, "the Cluster's LibvirtCluster does not exist yet")
		return true, nil
	}
	if m.cluster == nil || !ptr.Deref(m.cluster.Status.Initialization.InfrastructureProvisioned, false) || !ptr.Deref(m.lc.Status.Initialization.Provisioned, false) {
		m.condition(false, v1alpha1.WaitingForClusterInfrastructureReason, "waiting for LibvirtCluster %s to be provisioned", m.lc.Name)
		return true, nil
	}
	return false, nil
}

// reconcileBootstrapReady waits for the Machine's bootstrap data.
func (r *MachineReconciler) reconcileBootstrapReady(_ context.Context, m *machineScope) (bool, error) {
	if m.machine.Spec.Bootstrap.DataSecretName == nil {
		m.condition(false, v1alpha1.WaitingForBootstrapDataReason, "waiting for the Machine's bootstrap data (spec.bootstrap.dataSecretName)")
		return true, nil
	}
	return false, nil
}

// reconcileName checks that the machine's name can name a domain.
func (r *MachineReconciler) reconcileName(_ context.Context, m *machineScope) (bool, error) {
	name, err := domainName(m.lm.Name)
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "%v", err)
		return true, nil
	}
	m.name = name
	return false, nil
}

// reconcileAddress claims the machine's address and waits until it is
// bound (address).
func (r *MachineReconciler) reconcileAddress(ctx context.Context, m *machineScope) (bool, error) {
	addr, wait, err := r.address(ctx, m)
	if err != nil || wait {
		return wait, err
	}
	m.addr = addr
	return false, nil
}

// reconcileBootstrapData reads the Machine's bootstrap data.
func (r *MachineReconciler) reconcileBootstrapData(ctx context.Context, m *machineScope) (bool, error) {
	userData, err := r.bootstrapData(ctx, m)
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "%v", err)
		return true, nil
	}
	m.userData = userData
	return false, nil
}

// reconcileHosts connects to every host and looks for the machine's
// domain. With none found, a provisioned machine's domain was removed
// outside Cluster API, and a machine placed on a host that does not
// answer waits for it: the domain may be there.
func (r *MachineReconciler) reconcileHosts(ctx context.Context, m *machineScope) (bool, error) {
	m.hosts = r.Hosts.connectAll(ctx, m.lc, m.lm.Spec.Image.Pool)
	h, vm, err := r.findDomain(ctx, m, m.hosts, m.name)
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "%v", err)
		return true, nil
	}
	if h != nil {
		m.host, m.vm, m.found = h, vm, true
		return false, nil
	}
	if ptr.Deref(m.lm.Status.Initialization.Provisioned, false) {
		m.condition(false, v1alpha1.VirtualMachineNotFoundReason, "domain %s is gone from every host that answers: it was removed outside Cluster API; delete the Machine to replace it", m.name)
		return true, nil
	}
	if fd := m.lm.Status.FailureDomain; fd != "" {
		for _, o := range m.hosts {
			if o.spec.Name == fd && o.err != nil {
				m.condition(false, v1alpha1.HostUnreachableReason, "host %s, where this machine was placed, does not answer: %v", fd, o.err)
				return true, nil
			}
		}
	}
	return false, nil
}

// reconcilePlacement picks a host for a domain not found, and records it
// in status.failureDomain before anything is made there.
func (r *MachineReconciler) reconcilePlacement(ctx context.Context, m *machineScope) (bool, error) {
	if m.found {
		return false, nil
	}
	h, img, why := r.place(ctx, m, m.hosts)
	if h == nil {
		m.condition(false, reasonOf(why), "%s", strings.TrimPrefix(why, reasonOf(why)+": "))
		return true, nil
	}
	m.host, m.img = h, img
	if m.lm.Status.FailureDomain != h.spec.Name {
		m.lm.Status.FailureDomain = h.spec.Name
		if err := m.patch(ctx); err != nil {
			return false, err
		}
	}
	return false, r.step(StepPlaced)
}

// reconcileDomain makes the domain on the host picked: its volumes, its
// seed, and last its definition, so that a defined domain is complete.
func (r *MachineReconciler) reconcileDomain(ctx context.Context, m *machineScope) (bool, error) {
	if m.found {
		return false, nil
	}
	h, name := m.host, m.name
	netcfg, err := cloudinit.NetworkConfig(cloudinit.Static{
		MAC: hypervisor.StableMAC(m.lab, name), Address: m.addr.prefix, Gateway: m.addr.gateway, DNS: m.addr.dns,
	})
	if err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "address %s from IPAddress %s: %v", m.addr.prefix, m.addr.from, err)
		return true, nil
	}
	spec := hypervisor.VMSpec{
		Lab: m.lab, Name: name, UUID: string(m.lm.UID),
		CPUs: int(m.lm.Spec.CPUs), MemoryMiB: int(m.lm.Spec.MemoryMiB), DiskGiB: int(m.lm.Spec.DiskGiB),
		Image:   m.img,
		Network: hypervisor.NetworkSpec{MAC: hypervisor.StableMAC(m.lab, name)},
		CloudInit: hypervisor.CloudInit{
			InstanceID: string(m.lm.UID), Hostname: name, UserData: m.userData, NetworkConfig: netcfg,
			// The kubelet registers the providerID set below (labctl's
			// KubeadmConfigs read it), so the Node matches the Machine.
			ProviderID: v1alpha1.ProviderID(h.spec.Name, string(m.lm.UID)),
		},
		Tags: []string{"cluster-api"},
	}
	for _, d := range m.lm.Spec.ExtraDisks {
		spec.ExtraDisksGiB = append(spec.ExtraDisksGiB, int(d.SizeGiB))
	}
	if m.vm, err = h.d.CreateVM(ctx, spec); err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "creating domain %s on host %s: %v", name, h.spec.Name, err)
		return false, err
	}
	return false, r.step(StepDefined)
}

// reconcilePowerState starts the domain when it is not running.
func (r *MachineReconciler) reconcilePowerState(ctx context.Context, m *machineScope) (bool, error) {
	m.lm.Status.FailureDomain = m.host.spec.Name
	if m.vm.Running {
		return false, nil
	}
	if err := m.host.d.StartVM(ctx, m.vm); err != nil {
		m.condition(false, v1alpha1.ProvisioningFailedReason, "starting domain %s on host %s: %v", m.name, m.host.spec.Name, err)
		return false, err
	}
	return false, r.step(StepStarted)
}

// reconcileProviderID records the domain in spec.providerID.
func (r *MachineReconciler) reconcileProviderID(ctx context.Context, m *machineScope) (bool, error) {
	id := v1alpha1.ProviderID(m.host.spec.Name, m.vm.UUID)
	if m.lm.Spec.ProviderID == id {
		return false, nil
	}
	// The cache may not have seen yet what a reconcile cut off right
	// after this patch wrote (a requeue after an error comes within
	// milliseconds): ask the API server before writing it again.
	fresh := &v1alpha1.LibvirtMachine{}
	if err := r.Reader.Get(ctx, ctrl.ObjectKeyFromObject(m.lm), fresh); err == nil && fresh.Spec.ProviderID == id {
		m.lm.Spec.ProviderID = id
		return false, nil
	}
	m.lm.Spec.ProviderID = id
	if err := m.patch(ctx); err != nil {
		return false, err
	}
	return false, r.step(StepProviderID)
}

// reconcileProvisioned reports the running domain's addresses.
func (r *MachineReconciler) reconcileProvisioned(_ context.Context, m *machineScope) (bool, error) {
	m.lm.Status.Addresses = []clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: m.addr.prefix.Addr().String()},
		{Type: clusterv1.MachineHostName, Address: m.name},
	}
	m.lm.Status.Initialization.Provisioned = ptr.To(true)
	m.condition(true, v1alpha1.ProvisionedReason, "domain %s runs on host %s", m.name, m.host.spec.Name)
	return false, nil
}

func domainUUID(lm *v1alpha1.LibvirtMachine) string {
	return v1alpha1.DomainUUID(lm.Spec.ProviderID, lm.UID)
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
		err := r.Client.Create(ctx, claim)
		switch {
		case apierrors.IsAlreadyExists(err):
			// The cache had not seen the claim an earlier reconcile made:
			// read it past the cache rather than count a second claim.
			if err := r.Reader.Get(ctx, key, claim); err != nil {
				return staticAddress{}, false, fmt.Errorf("reading IPAddressClaim %s: %w", key.Name, err)
			}
		case err != nil:
			return staticAddress{}, false, fmt.Errorf("creating IPAddressClaim %s: %w", key.Name, err)
		default:
			if err := r.step(StepClaimCreated); err != nil {
				return staticAddress{}, false, err
			}
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

// deleteDomain removes the domain and its volumes from whichever host
// holds it. While the host the machine was placed on does not answer, it
// waits: the domain may still be there.
func (r *MachineReconciler) deleteDomain(ctx context.Context, m *machineScope) (bool, error) {
	m.condition(false, v1alpha1.DeletingReason, "deleting the domain")
	if !controllerutil.ContainsFinalizer(m.lm, v1alpha1.MachineFinalizer) {
		return false, nil
	}
	name, nameErr := domainName(m.lm.Name)
	placed := m.lm.Status.FailureDomain != "" || ptr.Deref(m.lm.Status.Initialization.Provisioned, false)
	if m.lc == nil && placed {
		m.condition(false, v1alpha1.DeletingReason, "the LibvirtCluster of cluster %s is gone, so the hosts of domain %s are unknown; recreate it to let the domain be removed", m.lm.Labels[clusterv1.ClusterNameLabel], name)
		return true, nil
	}
	if m.lc == nil || nameErr != nil {
		return false, nil
	}
	m.hosts = r.Hosts.connectAll(ctx, m.lc, m.lm.Spec.Image.Pool)
	for _, h := range m.hosts {
		if h.err != nil {
			if h.spec.Name == m.lm.Status.FailureDomain {
				m.condition(false, v1alpha1.HostUnreachableReason, "cannot delete domain %s: host %s does not answer: %v", name, h.spec.Name, h.err)
				return true, nil
			}
			continue
		}
		vm, err := h.d.FindVM(ctx, m.lab, name)
		if errors.Is(err, hypervisor.ErrNotFound) {
			// A create cut off before its define leaves volumes no
			// domain records.
			if err := h.d.RemoveLeftovers(ctx, name); err != nil {
				m.condition(false, v1alpha1.DeletingReason, "host %s: %v", h.spec.Name, err)
				return false, err
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("host %s: %w", h.spec.Name, err)
		}
		if vm.UUID != domainUUID(m.lm) {
			continue // another machine's
		}
		if err := h.d.DeleteVM(ctx, vm); err != nil {
			m.condition(false, v1alpha1.DeletingReason, "deleting domain %s on host %s: %v", name, h.spec.Name, err)
			return false, err
		}
		if err := r.step(StepDomainDeleted); err != nil {
			return false, err
		}
	}
	return false, nil
}

// releaseAddress deletes the machine's IPAddressClaim: the IPAM provider
// frees the address.
func (r *MachineReconciler) releaseAddress(ctx context.Context, m *machineScope) (bool, error) {
	if !controllerutil.ContainsFinalizer(m.lm, v1alpha1.MachineFinalizer) {
		return false, nil
	}
	claim := &ipamv1.IPAddressClaim{ObjectMeta: metav1.ObjectMeta{Namespace: m.lm.Namespace, Name: m.lm.Name}}
	if err := r.Client.Delete(ctx, claim); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("releasing IPAddressClaim %s: %w", claim.Name, err)
	}
	return false, r.step(StepClaimDeleted)
}

// removeFinalizer lets the LibvirtMachine go; the scope's patch writes it.
func (r *MachineReconciler) removeFinalizer(_ context.Context, m *machineScope) (bool, error) {
	controllerutil.RemoveFinalizer(m.lm, v1alpha1.MachineFinalizer)
	return false, nil
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
