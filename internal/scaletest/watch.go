package scaletest

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
)

// Resources watched in the management cluster: clusterapi's.
var (
	mdGVR      = clusterapi.MachineDeploymentResource
	msGVR      = clusterapi.MachineSetResource
	machineGVR = clusterapi.MachineResource
)

// Labels CAPI and kubeadm put on the objects watched.
const (
	DeploymentNameLabel = clusterapi.DeploymentNameLabel
)

// machine is what the timeline needs of one Machine.
type machine struct {
	provisioned bool
	deleting    bool
}

// state is the watched world at one moment.
type state struct {
	pods        map[string]corev1.PodPhase // inflate pods; "" phase means Pending and unbound
	nodes       map[string]bool            // worker Nodes → Ready
	machines    map[string]machine
	machineSets int
	mdReplicas  int64
	mdSeen      bool
}

func (s *state) pending() int {
	n := 0
	for _, p := range s.pods {
		if p == corev1.PodPending {
			n++
		}
	}
	return n
}

func (s *state) running() int {
	n := 0
	for _, p := range s.pods {
		if p == corev1.PodRunning {
			n++
		}
	}
	return n
}

// Sample is one point of the chart, taken at every watch event.
type Sample struct {
	At         time.Time `json:"at"`
	Nodes      int       `json:"nodes"`
	Pending    int       `json:"pendingPods"`
	MDReplicas int64     `json:"machineDeploymentReplicas"`
}

// observer is told of every change, under the watcher's lock.
type observer interface {
	observe(s *state, at time.Time)
}

// watcher keeps state current from informers on both clusters and
// records when each event arrived.
type watcher struct {
	mu      sync.Mutex
	st      state
	samples []Sample
	obs     observer
	changed chan struct{}
	// recorded, when set, is called after each event is recorded (the
	// watch-latency benchmark uses it).
	recorded func(kind, name string, at time.Time)
}

func newWatcher() *watcher {
	return &watcher{
		st:      state{pods: map[string]corev1.PodPhase{}, nodes: map[string]bool{}, machines: map[string]machine{}},
		changed: make(chan struct{}, 1),
	}
}

// update applies one event and records a chart sample.
func (w *watcher) update(kind, name string, f func(s *state)) {
	at := time.Now()
	w.mu.Lock()
	f(&w.st)
	w.samples = append(w.samples, Sample{At: at, Nodes: len(w.st.nodes), Pending: w.st.pending(), MDReplicas: w.st.mdReplicas})
	if w.obs != nil {
		w.obs.observe(&w.st, at)
	}
	rec := w.recorded
	w.mu.Unlock()
	if rec != nil {
		rec(kind, name, at)
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// setObserver makes o see the current state now and every change after.
func (w *watcher) setObserver(o observer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.obs = o
	if o != nil {
		o.observe(&w.st, time.Now())
	}
}

func (w *watcher) snapshot() (pending, running, total, nodes, ready, machines int, md int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.st.nodes {
		if r {
			ready++
		}
	}
	return w.st.pending(), w.st.running(), len(w.st.pods), len(w.st.nodes), ready, len(w.st.machines), w.st.mdReplicas
}

func (w *watcher) chart() []Sample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Sample(nil), w.samples...)
}

// target names what is watched.
type target struct {
	ns, md    string // management namespace and MachineDeployment
	podNS     string // workload namespace of the inflate pods
	podLabels string
	// nodeLabels selects the pool's Nodes: a cluster's other pools
	// keep theirs (a KVM pool at its min) and are not this pool's.
	nodeLabels string
}

// start runs the informers until ctx ends and returns once every cache
// has synced.
func (w *watcher) start(ctx context.Context, mgmt dynamic.Interface, wl kubernetes.Interface, t target) error {
	mdF := dynamicinformer.NewFilteredDynamicSharedInformerFactory(mgmt, 0, t.ns, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", t.md).String()
	})
	ownF := dynamicinformer.NewFilteredDynamicSharedInformerFactory(mgmt, 0, t.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = DeploymentNameLabel + "=" + t.md
	})
	podF := informers.NewSharedInformerFactoryWithOptions(wl, 0, informers.WithNamespace(t.podNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = t.podLabels }))
	nodeF := informers.NewSharedInformerFactoryWithOptions(wl, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = t.nodeLabels }))

	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{mdF.ForResource(mdGVR).Informer(), w.unstructuredHandler("MachineDeployment", func(s *state, u *unstructured.Unstructured, gone bool) {
			s.mdSeen = !gone
			s.mdReplicas, _, _ = unstructured.NestedInt64(u.Object, "spec", "replicas")
			if gone {
				s.mdReplicas = 0
			}
		})},
		{ownF.ForResource(msGVR).Informer(), w.unstructuredHandler("MachineSet", func(s *state, u *unstructured.Unstructured, gone bool) {
			s.machineSets = len(ownF.ForResource(msGVR).Informer().GetStore().ListKeys())
		})},
		{ownF.ForResource(machineGVR).Informer(), w.unstructuredHandler("Machine", func(s *state, u *unstructured.Unstructured, gone bool) {
			if gone {
				delete(s.machines, u.GetName())
				return
			}
			s.machines[u.GetName()] = machine{provisioned: machineProvisioned(u), deleting: u.GetDeletionTimestamp() != nil}
		})},
		{podF.Core().V1().Pods().Informer(), w.typedHandler("Pod", func(s *state, obj any, gone bool) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return
			}
			if gone {
				delete(s.pods, p.Name)
				return
			}
			s.pods[p.Name] = p.Status.Phase
			if p.Status.Phase == "" {
				s.pods[p.Name] = corev1.PodPending
			}
		})},
		{nodeF.Core().V1().Nodes().Informer(), w.typedHandler("Node", func(s *state, obj any, gone bool) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return
			}
			if _, cp := n.Labels[clusterapi.ControlPlaneRoleLabel]; cp {
				return
			}
			if gone {
				delete(s.nodes, n.Name)
				return
			}
			s.nodes[n.Name] = kube.NodeReady(n)
		})},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			return fmt.Errorf("watching: %w", err)
		}
	}
	mdF.Start(ctx.Done())
	ownF.Start(ctx.Done())
	podF.Start(ctx.Done())
	nodeF.Start(ctx.Done())
	for _, h := range handlers {
		if !cache.WaitForCacheSync(ctx.Done(), h.inf.HasSynced) {
			return fmt.Errorf("starting the watches: %w", context.Cause(ctx))
		}
	}
	return nil
}

func (w *watcher) unstructuredHandler(kind string, f func(s *state, u *unstructured.Unstructured, gone bool)) cache.ResourceEventHandlerFuncs {
	on := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		w.update(kind, u.GetName(), func(s *state) { f(s, u, gone) })
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(obj, false) },
		UpdateFunc: func(_, obj any) { on(obj, false) },
		DeleteFunc: func(obj any) { on(obj, true) },
	}
}

func (w *watcher) typedHandler(kind string, f func(s *state, obj any, gone bool)) cache.ResourceEventHandlerFuncs {
	on := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		name := ""
		if m, ok := obj.(metav1.Object); ok {
			name = m.GetName()
		}
		w.update(kind, name, func(s *state) { f(s, obj, gone) })
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { on(obj, false) },
		UpdateFunc: func(_, obj any) { on(obj, false) },
		DeleteFunc: func(obj any) { on(obj, true) },
	}
}

// machineProvisioned is true once the infrastructure (the VM) exists:
// v1beta2 status.initialization.infrastructureProvisioned, or a phase
// past Provisioning.
func machineProvisioned(u *unstructured.Unstructured) bool {
	if ok, _, _ := unstructured.NestedBool(u.Object, "status", "initialization", "infrastructureProvisioned"); ok {
		return true
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return phase == "Provisioned" || phase == "Running"
}
