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
	"fmt"
	"io"
	"net/http"
	"os"

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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
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
	// MetricsAddr and HealthAddr are where metrics and the health probes
	// listen; "0" turns metrics off.
	MetricsAddr, HealthAddr string
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

// Run runs the provider until ctx ends.
func Run(ctx context.Context, o Options) error {
	w := o.Log
	if w == nil {
		w = os.Stderr
	}
	logger := funcr.NewJSON(func(obj string) { fmt.Fprintln(w, obj) }, funcr.Options{})
	ctrllog.SetLogger(logger)

	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	s, err := Scheme()
	if err != nil {
		return err
	}
	mo := ctrl.Options{
		Scheme:                  s,
		Logger:                  logger,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.HealthAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        "libvirt-provider.infrastructure.labctl.dev",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// Controller names are registered process-wide for their metrics;
		// tests run the provider more than once in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Client: client.Options{Cache: &client.CacheOptions{
			// Secrets are read uncached: a cache of every Secret in the
			// cluster is neither needed nor welcome.
			DisableFor: []client.Object{&corev1.Secret{}},
		}},
	}
	if o.Namespace != "" {
		mo.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{o.Namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return fmt.Errorf("starting the provider's manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		return err
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
	if err := rs.setup(mgr, max(o.Concurrency, 1)); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the provider: %w", err)
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
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the management cluster (in-cluster config or $KUBECONFIG; or pass --kubeconfig): %w", err)
	}
	return cfg, nil
}

func (rs *Reconcilers) setup(mgr ctrl.Manager, concurrency int) error {
	c := mgr.GetClient()
	err := ctrl.NewControllerManagedBy(mgr).Named("libvirtmachine").
		For(&v1alpha1.LibvirtMachine{}).
		Owns(&ipamv1.IPAddressClaim{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(machineToLibvirtMachine)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToLibvirtMachines(c))).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(rs.Machine)
	if err != nil {
		return fmt.Errorf("setting up the LibvirtMachine controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("libvirtcluster").
		For(&v1alpha1.LibvirtCluster{}).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(clusterToLibvirtCluster)).
		Complete(rs.Cluster)
	if err != nil {
		return fmt.Errorf("setting up the LibvirtCluster controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("libvirtmachinetemplate").
		For(&v1alpha1.LibvirtMachineTemplate{}).
		Complete(rs.Template)
	if err != nil {
		return fmt.Errorf("setting up the LibvirtMachineTemplate controller: %w", err)
	}
	return nil
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

// clusterToLibvirtMachines maps a Cluster to its LibvirtMachines: they
// wait for its infrastructure, and for it to be unpaused.
func clusterToLibvirtMachines(c client.Client) handler.MapFunc {
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
