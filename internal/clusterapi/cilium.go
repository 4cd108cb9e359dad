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
func CiliumValues(lab *config.Lab, c *config.Cluster) map[string]any {
	host, port := Endpoint(lab, c)
	return map[string]any{
		"ipam":                  map[string]any{"mode": "kubernetes"},
		"ipv4NativeRoutingCIDR": c.PodCIDR,
		"k8sServiceHost":        host,
		"k8sServicePort":        port,
		"operator":              map[string]any{"replicas": 1},
	}
}
