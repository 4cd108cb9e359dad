// Package controller is labctl's Cluster API infrastructure provider for
// libvirt hosts: the reconcilers of LibvirtCluster, LibvirtMachine and
// LibvirtMachineTemplate (package ../api/v1alpha1), run by
// controller-runtime inside the labctl binary ('labctl provider libvirt').
// Hosts are reached through labctl's one libvirt driver
// (internal/hypervisor/libvirt) over qemu+ssh or qemu+tls, with the
// credentials of each host's Secret.
package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// Options are 'labctl provider libvirt's flags.
type Options struct {
	// Kubeconfig is the management cluster's kubeconfig; empty means the
	// in-cluster config (or $KUBECONFIG).
	Kubeconfig string
	// Namespace limits the provider to one namespace; empty watches all.
	Namespace string
	// HealthAddr is where /healthz and /readyz listen; "0" or empty: nowhere.
	HealthAddr string
	// LeaderElect runs one active replica among several.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease; empty means the pod's.
	LeaderElectionNamespace string
	// Concurrency is how many LibvirtMachines are reconciled at once.
	Concurrency int
	// Log receives the JSON log lines (stderr when nil).
	Log io.Writer
	// Tune adjusts the reconcilers before they start; tests set their
	// hooks there.
	Tune func(*Reconcilers)
}

// Reconcilers are the provider's three controllers.
type Reconcilers struct {
	Cluster  *ClusterReconciler
	Machine  *MachineReconciler
	Template *TemplateReconciler
}

// Scheme holds every type the provider reads or writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, ipamv1.AddToScheme, v1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building the provider's scheme: %w", err)
		}
	}
	return s, nil
}

// leaseName is the leader election lease.
const leaseName = "libvirt-provider.infrastructure.labctl.dev"

// Run runs the provider until ctx ends.
func Run(ctx context.Context, o Options) error {
	w := o.Log
	if w == nil {
		w = os.Stderr
	}
	var mu sync.Mutex
	log := funcr.NewJSON(func(obj string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, obj)
	}, funcr.Options{})

	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	s, err := Scheme()
	if err != nil {
		return err
	}
	co := cache.Options{Scheme: s}
	if o.Namespace != "" {
		co.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	informers, err := cache.New(cfg, co)
	if err != nil {
		return fmt.Errorf("starting the provider's cache: %w", err)
	}
	// Secrets are read uncached: a cache of every Secret in the cluster
	// is neither needed nor welcome.
	direct, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("connecting to the management cluster: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s, Cache: &client.CacheOptions{Reader: informers, DisableFor: []client.Object{&corev1.Secret{}}}})
	if err != nil {
		return fmt.Errorf("connecting to the management cluster: %w", err)
	}
	hosts := Hosts{Secrets: direct}
	rs := &Reconcilers{
		Cluster:  &ClusterReconciler{Client: c, Hosts: hosts},
		Machine:  &MachineReconciler{Client: c, Reader: direct, Hosts: hosts},
		Template: &TemplateReconciler{Client: c},
	}
	if o.Tune != nil {
		o.Tune(rs)
	}
	loops, err := rs.watch(ctx, informers, c, max(o.Concurrency, 1), log)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- informers.Start(ctx) }()
	var ready atomic.Bool
	if o.HealthAddr != "" && o.HealthAddr != "0" {
		srv, err := healthServer(o.HealthAddr, &ready)
		if err != nil {
			return err
		}
		go func() { errc <- srv.Serve() }()
		defer srv.Close()
	}
	if !informers.WaitForCacheSync(ctx) {
		cancel()
		if err := <-errc; err != nil {
			return fmt.Errorf("filling the provider's cache: %w", err)
		}
		return ctx.Err()
	}
	ready.Store(true)
	work := func(ctx context.Context) {
		log.Info("reconciling", "namespace", o.Namespace)
		var wg sync.WaitGroup
		for _, l := range loops {
			wg.Go(func() { l.run(ctx) })
		}
		wg.Wait()
	}
	if !o.LeaderElect {
		work(ctx)
		return nil
	}
	return leaderElect(ctx, cfg, o.LeaderElectionNamespace, log, work)
}

// watch makes the three loops and their watches: a LibvirtMachine is
// looked at when it, its Machine (bootstrap data, failure domain), its
// Cluster (infrastructure, pause) or its IPAddressClaim changes; a
// LibvirtCluster when it or its Cluster does.
func (rs *Reconcilers) watch(ctx context.Context, informers cache.Cache, c client.Client, concurrency int, log logr.Logger) ([]*loop, error) {
	machines := newLoop("libvirtmachine", rs.Machine, concurrency, log)
	clusters := newLoop("libvirtcluster", rs.Cluster, 1, log)
	templates := newLoop("libvirtmachinetemplate", rs.Template, 1, log)
	for _, w := range []struct {
		l   *loop
		obj client.Object
		m   mapFunc
	}{
		{machines, &v1alpha1.LibvirtMachine{}, self},
		{machines, &ipamv1.IPAddressClaim{}, ownerOfKind("LibvirtMachine")},
		{machines, &clusterv1.Machine{}, machineToLibvirtMachine},
		{machines, &clusterv1.Cluster{}, clusterToLibvirtMachines(c)},
		{machines, &v1alpha1.LibvirtCluster{}, libvirtClusterToLibvirtMachines(c)},
		{clusters, &v1alpha1.LibvirtCluster{}, self},
		{clusters, &clusterv1.Cluster{}, clusterToLibvirtCluster},
		{templates, &v1alpha1.LibvirtMachineTemplate{}, self},
	} {
		if err := w.l.watch(ctx, informers, w.obj, w.m); err != nil {
			return nil, err
		}
	}
	return []*loop{machines, clusters, templates}, nil
}

// ownerOfKind maps an object to its controller owner of that kind in the
// provider's group.
func ownerOfKind(kind string) mapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		for _, ref := range o.GetOwnerReferences() {
			if ref.Kind == kind && groupOf(ref.APIVersion) == v1alpha1.GroupVersion.Group {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
			}
		}
		return nil
	}
}

// health answers /healthz always and /readyz once the cache is filled.
type health struct {
	l   net.Listener
	srv *http.Server
}

func healthServer(addr string, ready *atomic.Bool) (*health, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health probes on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "the cache is not filled yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	return &health{l: l, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

func (h *health) Serve() error {
	if err := h.srv.Serve(h.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (h *health) Close() { _ = h.srv.Close() }

// leaderElect runs work while this replica holds the lease (client-go's
// leader election on a Lease, as controller-runtime's manager does), and
// returns when ctx ends or the lease is lost.
func leaderElect(ctx context.Context, cfg *rest.Config, ns string, log logr.Logger, work func(context.Context)) error {
	if ns == "" {
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return fmt.Errorf("leader election: no --leader-election-namespace, and not in a pod: %w", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	id, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	id += "_" + string(uuid.NewUUID())
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, ns, leaseName,
		resourcelock.ResourceLockConfig{Identity: id}, cfg, 10*time.Second)
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	lost := make(chan struct{})
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ReleaseOnCancel: true, Name: leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: work,
			OnStoppedLeading: func() { close(lost) },
		},
	})
	// OnStoppedLeading runs on a cancelled ctx too (the lease released):
	// only a lease lost while ctx lives is an error.
	if ctx.Err() != nil {
		return nil
	}
	<-lost
	log.Info("lost the leader lease; stopping")
	return errors.New("leader election: lost the lease")
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the management cluster (in-cluster config or $KUBECONFIG; or pass --kubeconfig): %w", err)
	}
	return cfg, nil
}

// machineToLibvirtMachine maps a Machine to its LibvirtMachine: its
// bootstrap data and failure domain arrive on the Machine.
func machineToLibvirtMachine(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*clusterv1.Machine)
	if !ok {
		return nil
	}
	ref := m.Spec.InfrastructureRef
	if ref.Kind != "LibvirtMachine" || ref.APIGroup != v1alpha1.GroupVersion.Group {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: ref.Name}}}
}

// clusterToLibvirtCluster maps a Cluster to its LibvirtCluster.
func clusterToLibvirtCluster(_ context.Context, o client.Object) []reconcile.Request {
	cl, ok := o.(*clusterv1.Cluster)
	if !ok {
		return nil
	}
	ref := cl.Spec.InfrastructureRef
	if ref.Kind != "LibvirtCluster" || ref.APIGroup != v1alpha1.GroupVersion.Group {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: cl.Namespace, Name: ref.Name}}}
}

// libvirtClusterToLibvirtMachines maps a LibvirtCluster the Cluster does
// not reference to the LibvirtMachines naming it (ClusterAnnotation):
// they wait for it to be provisioned, which no Cluster change reports.
func libvirtClusterToLibvirtMachines(c client.Client) mapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.LibvirtMachineList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetLabels()[clusterv1.ClusterNameLabel]}); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, lm := range list.Items {
			if lm.Annotations[v1alpha1.ClusterAnnotation] == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: lm.Namespace, Name: lm.Name}})
			}
		}
		return out
	}
}

// clusterToLibvirtMachines maps a Cluster to its LibvirtMachines: they
// wait for its infrastructure, and for it to be unpaused.
func clusterToLibvirtMachines(c client.Client) mapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list v1alpha1.LibvirtMachineList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{clusterv1.ClusterNameLabel: o.GetName()}); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, lm := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: lm.Namespace, Name: lm.Name}})
		}
		return out
	}
}
