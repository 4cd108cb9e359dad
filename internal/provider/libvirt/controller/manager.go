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
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
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

// Run runs the provider until ctx ends, on controller-runtime's manager:
// its cache and client, one controller per kind, health probes, and
// leader election on a Lease.
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
	ctrllog.SetLogger(log)

	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	s, err := Scheme()
	if err != nil {
		return err
	}
	co := cache.Options{}
	if o.Namespace != "" {
		co.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	health := o.HealthAddr
	if health == "" {
		health = "0"
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: s, Logger: log, Cache: co,
		// Secrets are read uncached: a cache of every Secret in the
		// cluster is neither needed nor welcome.
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        health,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Tests run several providers in one process; each is alone in
		// its own.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("starting the provider: %w", err)
	}
	hosts := Hosts{Secrets: mgr.GetAPIReader()}
	rs := &Reconcilers{
		Cluster:  &ClusterReconciler{Client: mgr.GetClient(), Hosts: hosts},
		Machine:  &MachineReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Hosts: hosts},
		Template: &TemplateReconciler{Client: mgr.GetClient()},
	}
	if o.Tune != nil {
		o.Tune(rs)
	}
	if err := rs.setup(ctx, mgr, max(o.Concurrency, 1)); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("health probes: %w", err)
	}
	if err := mgr.AddReadyzCheck("cache", cacheSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("health probes: %w", err)
	}
	log.Info("reconciling", "namespace", o.Namespace)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("libvirt provider: %w", err)
	}
	return nil
}

// cacheSynced answers ready once the cache is filled, leader or not.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the cache is not filled yet")
		}
		return nil
	}
}

// setup makes the three controllers and their watches: a LibvirtMachine
// is looked at when it, its Machine (bootstrap data, failure domain), its
// Cluster (infrastructure, pause), its LibvirtCluster or its
// IPAddressClaim changes; a LibvirtCluster when it or its Cluster does.
func (rs *Reconcilers) setup(ctx context.Context, mgr manager.Manager, concurrency int) error {
	c := mgr.GetClient()
	clusterToMachines, err := util.ClusterToTypedObjectsMapper(c, &v1alpha1.LibvirtMachineList{}, mgr.GetScheme())
	if err != nil {
		return fmt.Errorf("libvirtmachine controller: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).Named("libvirtmachine").
		For(&v1alpha1.LibvirtMachine{}).
		Owns(&ipamv1.IPAddressClaim{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(v1alpha1.GroupVersion.WithKind("LibvirtMachine")))).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToMachines)).
		Watches(&v1alpha1.LibvirtCluster{}, handler.EnqueueRequestsFromMapFunc(libvirtClusterToLibvirtMachines(c))).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(rs.Machine)
	if err != nil {
		return fmt.Errorf("libvirtmachine controller: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).Named("libvirtcluster").
		For(&v1alpha1.LibvirtCluster{}).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToLibvirtClusters(c))).
		Complete(rs.Cluster)
	if err != nil {
		return fmt.Errorf("libvirtcluster controller: %w", err)
	}
	if err := builder.ControllerManagedBy(mgr).Named("libvirtmachinetemplate").For(&v1alpha1.LibvirtMachineTemplate{}).Complete(rs.Template); err != nil {
		return fmt.Errorf("libvirtmachinetemplate controller: %w", err)
	}
	return nil
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

// clusterToLibvirtClusters maps a Cluster to its LibvirtCluster and to
// the LibvirtClusters of its pools on other hosts, which its label names
// (no reference or owner ties them to it). A pool's LibvirtCluster made
// before its Cluster (a restore: labctl puts it back before clusterctl
// recreates the Cluster, paused) waits for the Cluster, and only a
// Cluster event says it came or was unpaused. CAPI's
// util.ClusterToInfrastructureMapFunc covers the referenced one only.
func clusterToLibvirtClusters(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		cl, ok := o.(*clusterv1.Cluster)
		if !ok {
			return nil
		}
		var out []reconcile.Request
		ref := cl.Spec.InfrastructureRef
		referenced := ref.Kind == "LibvirtCluster" && ref.APIGroup == v1alpha1.GroupVersion.Group
		if referenced {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cl.Namespace, Name: ref.Name}})
		}
		var list v1alpha1.LibvirtClusterList
		if err := c.List(ctx, &list, client.InNamespace(cl.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cl.Name}); err != nil {
			return out
		}
		for _, lc := range list.Items {
			if !referenced || lc.Name != ref.Name {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: lc.Namespace, Name: lc.Name}})
			}
		}
		return out
	}
}

// libvirtClusterToLibvirtMachines maps a LibvirtCluster the Cluster does
// not reference to the LibvirtMachines naming it (ClusterAnnotation):
// they wait for it to be provisioned, which no Cluster change reports.
func libvirtClusterToLibvirtMachines(c client.Client) handler.MapFunc {
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
