package runner

import (
	"context"
	"fmt"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"
)

// NodeName is the Node the runner stands for. The StatefulSet Pods it runs
// are bound to it, as a scheduler binds a Pod, so that the API server's
// pods/portforward (which goes to the Pod's node) reaches the runner's
// kubelet server (portforward.go). Deployments' processes stand for Pods
// that are never written, so nothing binds them.
const NodeName = "labctl-test-bed-runner"

// The Node is kept alive as kubelet keeps its own: a Lease in
// kube-node-lease renewed by kubelet's own lease controller
// (k8s.io/component-helpers/apimachinery/lease, with kubelet's defaults:
// NodeLeaseDurationSeconds 40, renewed at a quarter of it), and the Ready
// condition posted again when it is not what the runner says or after
// nodeStatusReportFrequency. The other way, leaving the node lifecycle
// controller out of the box's kube-controller-manager, would change every
// test's control plane, and a runner that stops (Box.StopControllers)
// would leave a Node Ready for ever, where a lost kubelet's goes NotReady
// and its Pods are evicted: the heartbeat keeps that as it is.
const (
	nodeLeaseSeconds          = 40
	nodeLeaseRenew            = nodeLeaseSeconds * time.Second / 4
	nodeStatusReportFrequency = 5 * time.Minute
)

// ensureNode starts the kubelet server and registers the Node, with its
// heartbeat, the first time a Pod is to be bound to it.
func (r *Runner) ensureNode(ctx context.Context) error {
	r.nodeMu.Lock()
	defer r.nodeMu.Unlock()
	if r.kubelet == nil {
		k, err := r.serveKubelet()
		if err != nil {
			return err
		}
		r.kubelet = k
	}
	if r.nodeUp {
		return nil
	}
	if err := r.postNodeStatus(ctx, r.kubelet.port, true); err != nil {
		return err
	}
	r.nodeUp = true
	lc := lease.NewController(clock.RealClock{}, r.cs, NodeName, nodeLeaseSeconds, nil, nodeLeaseRenew,
		NodeName, corev1.NamespaceNodeLease, r.nodeOwnsLease(ctx))
	go lc.Run(ctx)
	go r.nodeStatusLoop(ctx, r.kubelet.port)
	r.logf("Node %s registered, its kubelet server at 127.0.0.1:%d", NodeName, r.kubelet.port)
	return nil
}

// nodeOwnsLease makes the Node own its Lease, as kubelet's
// SetNodeOwnerFunc (pkg/kubelet/util/nodelease.go) does, so the Lease
// goes with the Node.
func (r *Runner) nodeOwnsLease(ctx context.Context) lease.ProcessLeaseFunc {
	return func(l *coordinationv1.Lease) error {
		if len(l.OwnerReferences) > 0 {
			return nil
		}
		n, err := r.cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting Node %s to own its Lease: %w", NodeName, err)
		}
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: NodeName, UID: n.UID}}
		return nil
	}
}

func (r *Runner) nodeStatusLoop(ctx context.Context, port int) {
	tick := time.NewTicker(nodeLeaseRenew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := r.postNodeStatus(ctx, port, false); err != nil && ctx.Err() == nil {
			r.logf("Node %s status: %v", NodeName, err)
		}
	}
}

// postNodeStatus registers the Node (when missing) or writes its status
// when nodeStatusDue says so, or always when force.
func (r *Runner) postNodeStatus(ctx context.Context, port int, force bool) error {
	now := time.Now()
	n, err := r.cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Labels as kubelet's initialNode sets them.
		n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{
			corev1.LabelHostname: NodeName, corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH,
		}}, Status: nodeStatus(port, now)}
		if _, err := r.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("registering Node %s: %w", NodeName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting Node %s: %w", NodeName, err)
	}
	if !force && !nodeStatusDue(n, port, now) {
		return nil
	}
	n.Status = nodeStatus(port, now)
	if _, err := r.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("posting Node %s status: %w", NodeName, err)
	}
	return nil
}

// nodeStatus is what the API server needs to reach the kubelet server
// (kube-apiserver's NodeConnectionInfoGetter: the preferred address, of
// which there is only the InternalIP, and daemonEndpoints' port) and the
// Ready condition, as kubelet's setters write it.
func nodeStatus(port int, now time.Time) corev1.NodeStatus {
	t := metav1.NewTime(now)
	return corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "labctl test bed runner is posting ready status", LastHeartbeatTime: t, LastTransitionTime: t,
		}},
		NodeInfo: corev1.NodeSystemInfo{OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH},
	}
}

// nodeStatusDue says whether the Node's status must be posted again, as
// kubelet's tryUpdateNodeStatus decides: something the runner reports
// changed (the node lifecycle controller marked it not Ready, or the
// kubelet server moved), or nodeStatusReportFrequency passed since the
// last heartbeat.
func nodeStatusDue(n *corev1.Node, port int, now time.Time) bool {
	if int(n.Status.DaemonEndpoints.KubeletEndpoint.Port) != port ||
		len(n.Status.Addresses) != 1 || n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}) {
		return true
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue || now.Sub(c.LastHeartbeatTime.Time) >= nodeStatusReportFrequency
		}
	}
	return true
}

// bind binds the Pod to the runner's Node through pods/binding, as a
// scheduler does, before its process starts: the process is started from
// the Pod's spec, which binding changes (spec.nodeName).
func (r *Runner) bind(ctx context.Context, p *corev1.Pod) error {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: NodeName},
	}
	if err := r.cs.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding Pod %s/%s to Node %s: %w", p.Namespace, p.Name, NodeName, err)
	}
	r.logf("Pod %s/%s bound to Node %s", p.Namespace, p.Name, NodeName)
	return nil
}
