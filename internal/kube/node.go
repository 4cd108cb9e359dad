package kube

import corev1 "k8s.io/api/core/v1"

// NodeReady is a Node's Ready condition being True: what kubectl get
// nodes shows as Ready.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
