package runner

import (
	"context"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The runner plays the kubelet for the Pods of StatefulSets of a known
// image (the kamaji-etcd chart's etcd): the real StatefulSet controller
// in the box's kube-controller-manager makes each Pod and its
// PersistentVolumeClaims, and counts the replicas ready from the Pods'
// status; the runner runs a process per Pod and reports that Pod Running
// and Ready as kubelet's status manager would. A Pod's process is keyed
// by the Pod (namespace/name), so Runner.Proc finds it by the Pod's name.
//
// A persistentVolumeClaim volume is a folder of the runner's that outlives
// the process and the Pod, as k3s's local-path provisioner keeps a
// volume's folder on the node: a Pod made again for the same claim finds
// its data.

// podNameAnnotation carries the Pod's own name on the Deployment-shaped
// view the runner starts a StatefulSet's Pod from (podView); it is never
// written to the API server.
const podNameAnnotation = "runner.labctl.dev/pod-name"

// statefulPods runs the processes of the known StatefulSets' Pods and
// reports each Pod's status; seen gets each Pod's key.
func (r *Runner) statefulPods(ctx context.Context, seen map[string]bool) {
	sets, err := r.cs.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			r.logf("listing StatefulSets: %v", err)
		}
		return
	}
	for i := range sets.Items {
		set := &sets.Items[i]
		if set.DeletionTimestamp != nil || len(r.containers(&appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: set.Spec.Template}})) == 0 {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
		if err != nil {
			continue
		}
		pods, err := r.cs.CoreV1().Pods(set.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			continue
		}
		for j := range pods.Items {
			p := &pods.Items[j]
			if p.DeletionTimestamp != nil || !metav1.IsControlledBy(p, set) {
				continue
			}
			if !r.bound(ctx, p) {
				continue
			}
			d := podView(p)
			cs := r.containers(d)
			if len(cs) == 0 {
				continue
			}
			seen[p.Namespace+"/"+p.Name] = true
			ready, why := r.ensure(ctx, d, cs)
			r.reportPod(ctx, p, ready, why)
		}
	}
}

// bound binds the Pod to the runner's Node when no node has it yet, and
// says whether it is the runner's to run: bound to its Node. Binding
// comes before the process starts, which is started from the Pod's spec
// (spec.nodeName included), so that the binding does not restart it.
func (r *Runner) bound(ctx context.Context, p *corev1.Pod) bool {
	if p.Spec.NodeName != "" && p.Spec.NodeName != NodeName {
		return false
	}
	if err := r.ensureNode(ctx); err != nil {
		if ctx.Err() == nil {
			r.logf("the runner's Node: %v", err)
		}
		return false
	}
	if p.Spec.NodeName == NodeName {
		return true
	}
	if err := r.bind(ctx, p); err != nil {
		if ctx.Err() == nil {
			r.logf("%v", err)
		}
		return false
	}
	p.Spec.NodeName = NodeName
	return true
}

// podView is a StatefulSet's Pod in the shape the runner starts processes
// from: its spec as the pod template, its labels (for Services' selectors)
// and its own name (podNameAnnotation, for the downward API's
// metadata.name: etcd's --name=$(POD_NAME)).
func podView(p *corev1.Pod) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			Annotations: map[string]string{podNameAnnotation: p.Name}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: p.Labels},
			Spec:       p.Spec,
		}},
	}
}

// ownedByStatefulSet says whether a StatefulSet controls the Pod: such
// Pods are statefulPods', not a PodHandler's, even where their image
// shares a name with a Job's (etcd).
func ownedByStatefulSet(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "StatefulSet"
}

// reportPod writes the Pod's status as kubelet's status manager does for
// a running pod: phase Running, and the Ready and ContainersReady
// conditions (which the StatefulSet controller counts) as the process's
// readiness. It writes only when the readiness changed.
func (r *Runner) reportPod(ctx context.Context, p *corev1.Pod, ready bool, why string) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	if p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == status {
		return
	}
	now := metav1.Now()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	if p.Status.StartTime == nil {
		p.Status.StartTime = &now
	}
	p.Status.PodIP, p.Status.HostIP = "127.0.0.1", "127.0.0.1"
	p.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	msg := ""
	if !ready {
		msg = "labctl test bed runner: " + why
	}
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now, Message: msg},
		{Type: corev1.PodReady, Status: status, LastTransitionTime: now, Message: msg},
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		started := true
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: ready, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *p.Status.StartTime}},
		})
	}
	if _, err := r.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		if ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			r.logf("reporting Pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		r.Kick()
		return
	}
	if ready {
		r.logf("Pod %s/%s is Running and Ready", p.Namespace, p.Name)
	} else {
		r.logf("Pod %s/%s is Running, not Ready: %s", p.Namespace, p.Name, why)
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// claimFolder is where a persistentVolumeClaim volume lives: by claim, so
// it outlives the Pod.
func (r *Runner) claimFolder(namespace, claim string) (string, error) {
	dir := filepath.Join(r.dir, "volumes", namespace+"_"+claim)
	return dir, os.MkdirAll(dir, 0o700)
}
