package clusterapi

import (
	"github.com/labctl/labctl/internal/config"
)

// Cilium's release in each workload cluster.
const (
	CiliumRelease   = "cilium"
	CiliumNamespace = "kube-system"
)

// CiliumValues are the Helm values 'cluster create' installs Cilium with.
//
//   - ipam.mode kubernetes: each node's pods get addresses from the
//     node's spec.podCIDR, which kube-controller-manager cuts from the
//     Cluster's pod CIDR (clusterNetwork.pods). Cilium then waits for that
//     podCIDR (k8s-require-ipv4-pod-cidr follows from the mode).
//     clusterPoolIPv4PodCIDRList is for cluster-pool IPAM and is not set.
//   - ipv4NativeRoutingCIDR: the pod CIDR, the range Cilium does not
//     masquerade and would route natively.
//   - k8sServiceHost/Port: the API server's address (Endpoint): the
//     kube-vip VIP, or a tenant's management.ip:port. Cilium cannot use
//     the kubernetes Service before it is up itself.
//   - operator.replicas 1: the control plane is the one node guaranteed to
//     exist (workers scale to zero); a second operator replica would stay
//     Pending and make the autoscaler add a worker for nothing.
//   - for a tenant, operator.podAnnotations TenantSystemPodAnnotations: a
//     tenant has no control-plane node, so the operator runs on a worker.
func CiliumValues(lab *config.Lab, c *config.Cluster) map[string]any {
	host, port := Endpoint(lab, c)
	operator := map[string]any{"replicas": 1}
	if c.Kamaji() {
		operator["podAnnotations"] = TenantSystemPodAnnotations()
	}
	return map[string]any{
		"ipam":                  map[string]any{"mode": "kubernetes"},
		"ipv4NativeRoutingCIDR": c.PodCIDR,
		"k8sServiceHost":        host,
		"k8sServicePort":        port,
		"operator":              operator,
	}
}

// TenantSystemPodAnnotations let the autoscaler take a tenant's workers
// to zero and keep them there, given to the kube-system Deployments that
// run on them (Kamaji's CoreDNS, Cilium's operator): a tenant has no
// control-plane node. cluster-autoscaler 1.35 never removes a node that
// runs a kube-system pod no DaemonSet or PodDisruptionBudget covers
// (simulator/drainability/rules/system), so the last worker would stay;
// and once that node went, those pods, Pending, would raise the pool
// again on their own. safe-to-evict lets it remove their node
// (utils/drain/drain.go), and a pod-scale-up-delay of a year keeps them
// from raising the pool (core/static_autoscaler.go filterOutYoungPods):
// the next workload's pod raises it, and they land on that node too.
func TenantSystemPodAnnotations() map[string]any {
	return map[string]any{
		"cluster-autoscaler.kubernetes.io/safe-to-evict":      "true",
		"cluster-autoscaler.kubernetes.io/pod-scale-up-delay": "8760h",
	}
}
