package scaletest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The stand-in actor plays, with scripted delays, what cannot run on the
// test bed: cluster-autoscaler (MachineDeployment replicas), Cluster API
// and the infrastructure provider (Machines), the kubelets (Nodes, pod
// status) and the scheduler (pod binding; no scheduler runs here).
// Stand-in workers have 2 CPUs, so each takes one 1500m inflate pod and
// 1→3 pods needs 3 workers, as the MachineDeployment going to 3 in the
// issue's example.

const (
	testNS = "lab1"
	testMD = "lab1-workers"
	// standInFinalizer holds a stand-in Machine while it is "deleting".
	standInFinalizer = "stand-in.labctl.dev/capi"
)

// script is the stand-in's delays for one scale-up and one scale-down.
type script struct {
	decide, create, provision, register, ready, run time.Duration
	// noMachines makes the stand-in never create a Machine.
	noMachines bool
	// Scale-down: autoscaler decision, Machine deletion, VM gone, Node gone.
	downDecide, deleting, vmGone, nodeGone time.Duration
}

var realistic = script{
	decide: 2 * time.Second, create: 1500 * time.Millisecond, provision: 1500 * time.Millisecond,
	register: time.Second, ready: time.Second, run: time.Second,
	downDecide: 1500 * time.Millisecond, deleting: time.Second, vmGone: 1500 * time.Millisecond, nodeGone: time.Second,
}

// standIn is the stand-in actor. did records when each scripted action's
// write returned, by the milestone labctl should report for it.
type standIn struct {
	t    testing.TB
	kc   kubernetes.Interface
	dc   dynamic.Interface
	s    script
	mu   sync.Mutex
	did  []map[string]time.Time // one map per phase
	next int                    // Machine/Node name counter
}

func (a *standIn) record(milestone string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.did[len(a.did)-1][milestone] = time.Now()
}

func (a *standIn) newPhase() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.did = append(a.did, map[string]time.Time{})
}

func (a *standIn) phases() []map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]time.Time(nil), a.did...)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// waitPods waits (polling is fine for the stand-in) until cond holds for
// the inflate pods.
func (a *standIn) waitPods(ctx context.Context, cond func(pods []corev1.Pod) bool) ([]corev1.Pod, bool) {
	for ctx.Err() == nil {
		l, err := a.kc.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: AppLabel + "=" + AppName})
		if err == nil && cond(l.Items) {
			return l.Items, true
		}
		sleep(ctx, 30*time.Millisecond)
	}
	return nil, false
}

func unbound(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			out = append(out, p)
		}
	}
	return out
}

// kubelet binds pods to nodes (one per node) and marks them Running.
func (a *standIn) kubelet(ctx context.Context, pods []corev1.Pod, nodes []string) error {
	for i, p := range pods {
		if i >= len(nodes) {
			break
		}
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, Target: corev1.ObjectReference{Kind: "Node", Name: nodes[i]}}
		if err := a.kc.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("stand-in scheduler: binding %s: %w", p.Name, err)
		}
		cur, err := a.kc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Phase = corev1.PodRunning
		cur.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := a.kc.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("stand-in kubelet: pod %s Running: %w", p.Name, err)
		}
	}
	return nil
}

func (a *standIn) setMD(ctx context.Context, n int64) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := a.dc.Resource(mdGVR).Namespace(testNS).Patch(ctx, testMD, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "stand-in-autoscaler"})
	return err
}

// worker creates a Machine (phase Provisioning) named name.
func (a *standIn) createMachine(ctx context.Context, name string) error {
	m := &unstructured.Unstructured{}
	m.SetAPIVersion("cluster.x-k8s.io/v1beta2")
	m.SetKind("Machine")
	m.SetNamespace(testNS)
	m.SetName(name)
	m.SetLabels(map[string]string{DeploymentNameLabel: testMD, "cluster.x-k8s.io/cluster-name": "lab1"})
	m.SetFinalizers([]string{standInFinalizer})
	_ = unstructured.SetNestedField(m.Object, "lab1", "spec", "clusterName")
	_ = unstructured.SetNestedMap(m.Object, map[string]any{"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}}, "spec", "bootstrap")
	_ = unstructured.SetNestedMap(m.Object, map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProxmoxMachine", "name": name}, "spec", "infrastructureRef")
	_, err := a.dc.Resource(machineGVR).Namespace(testNS).Create(ctx, m, metav1.CreateOptions{})
	return err
}

func (a *standIn) machinePhase(ctx context.Context, name, phase string) error {
	u, err := a.dc.Resource(machineGVR).Namespace(testNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	_ = unstructured.SetNestedField(u.Object, phase, "status", "phase")
	_, err = a.dc.Resource(machineGVR).Namespace(testNS).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

func (a *standIn) createNode(ctx context.Context, name string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/worker": ""}}}
	if _, err := a.kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return err
	}
	return nil
}

func (a *standIn) nodeReady(ctx context.Context, name string) error {
	n, err := a.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	n.Status.Allocatable = n.Status.Capacity
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	_, err = a.kc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// addWorkers is a worker already running (the test's starting point).
func (a *standIn) addWorker(ctx context.Context) (string, error) {
	a.next++
	name := fmt.Sprintf("%s-%d", testMD, a.next)
	for _, f := range []func() error{
		func() error { return a.createMachine(ctx, name) },
		func() error { return a.machinePhase(ctx, name, "Running") },
		func() error { return a.createNode(ctx, name) },
		func() error { return a.nodeReady(ctx, name) },
	} {
		if err := f(); err != nil {
			return "", err
		}
	}
	return name, nil
}

// scaleUp plays one scale-up: the pending pods (beyond the nodes with
// room) get workers, one each.
func (a *standIn) scaleUp(ctx context.Context, from int64, pending []corev1.Pod) error {
	s := a.s
	n := int64(len(pending))
	if !sleep(ctx, s.decide) {
		return nil
	}
	if err := a.setMD(ctx, from+n); err != nil {
		return fmt.Errorf("stand-in autoscaler: %w", err)
	}
	a.record(MDScaledUp)
	if s.noMachines {
		<-ctx.Done()
		return nil
	}
	if !sleep(ctx, s.create) {
		return nil
	}
	var names []string
	for range n {
		a.next++
		name := fmt.Sprintf("%s-%d", testMD, a.next)
		if err := a.createMachine(ctx, name); err != nil {
			return fmt.Errorf("stand-in CAPI: %w", err)
		}
		names = append(names, name)
	}
	a.record(MachineCreated)
	steps := []struct {
		d         time.Duration
		milestone string
		do        func(name string) error
	}{
		{s.provision, MachineProvisioned, func(nm string) error { return a.machinePhase(ctx, nm, "Provisioned") }},
		{s.register, NodeRegistered, func(nm string) error { return a.createNode(ctx, nm) }},
		{s.ready, NodeReady, func(nm string) error { return a.nodeReady(ctx, nm) }},
	}
	for _, st := range steps {
		if !sleep(ctx, st.d) {
			return nil
		}
		for _, nm := range names {
			if err := st.do(nm); err != nil {
				return fmt.Errorf("stand-in %s: %w", st.milestone, err)
			}
		}
		a.record(st.milestone)
	}
	if !sleep(ctx, s.run) {
		return nil
	}
	if err := a.kubelet(ctx, pending, names); err != nil {
		return err
	}
	a.record(PodsRunning)
	return nil
}

// scaleDown plays the autoscaler and CAPI removing every worker.
func (a *standIn) scaleDown(ctx context.Context) error {
	s := a.s
	if !sleep(ctx, s.downDecide) {
		return nil
	}
	if err := a.setMD(ctx, 0); err != nil {
		return err
	}
	a.record(MDScaledDown)
	if !sleep(ctx, s.deleting) {
		return nil
	}
	ms, err := a.dc.Resource(machineGVR).Namespace(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, m := range ms.Items {
		if err := a.dc.Resource(machineGVR).Namespace(testNS).Delete(ctx, m.GetName(), metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	a.record(MachineDeleting)
	if !sleep(ctx, s.vmGone) {
		return nil
	}
	for _, m := range ms.Items {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := a.dc.Resource(machineGVR).Namespace(testNS).Patch(ctx, m.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	a.record(MachineGone)
	if !sleep(ctx, s.nodeGone) {
		return nil
	}
	if err := a.kc.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	a.record(NodeGone)
	return nil
}

// playAll follows labctl's "all" scenario from one running worker:
// the starting pod, scale-up 1→3, scale-down to 0, scale-from-zero.
func (a *standIn) playAll(ctx context.Context, first string) error {
	// Set-up of scale-up: the first pod runs on the existing worker.
	pods, ok := a.waitPods(ctx, func(p []corev1.Pod) bool { return len(unbound(p)) == 1 })
	if !ok {
		return nil
	}
	if err := a.kubelet(ctx, unbound(pods), []string{first}); err != nil {
		return err
	}
	a.newPhase()
	if pods, ok = a.waitPods(ctx, func(p []corev1.Pod) bool { return len(p) == UpPods(1) && len(unbound(p)) == UpPods(1)-1 }); !ok {
		return nil
	}
	if err := a.scaleUp(ctx, 1, unbound(pods)); err != nil || a.s.noMachines {
		return err
	}
	a.newPhase()
	if _, ok = a.waitPods(ctx, func(p []corev1.Pod) bool { return len(p) == 0 }); !ok {
		return nil
	}
	if err := a.scaleDown(ctx); err != nil {
		return err
	}
	a.newPhase()
	if pods, ok = a.waitPods(ctx, func(p []corev1.Pod) bool { return len(unbound(p)) == 1 }); !ok {
		return nil
	}
	return a.scaleUp(ctx, 0, unbound(pods))
}
