package clusterapi

import (
	"github.com/labctl/labctl/internal/config"
)

// Cilium's release in each workload cluster.
const (
	CiliumRelease   = "cilium"
	CiliumNamespace = "kube-system"
	// ControlPlaneRoleLabel is the label kubeadm gives control-plane
	// Nodes (cmd/kubeadm/app/constants LabelNodeRoleControlPlane).
	ControlPlaneRoleLabel = "node-role.kubernetes.io/control-plane"
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
//   - for a kubeadm cluster, operator.nodeSelector the control-plane
//     role: the chart's operator tolerates every taint but may land on
//     any node, and on a worker, at system-cluster-critical, it would keep
//     that worker from going (the pool could not rest at zero).
//   - for a tenant, operator.priorityClassName TenantAddonPriorityClass:
//     a tenant has no control-plane node, so the operator runs on a
//     worker, and at the chart's default, system-cluster-critical, it
//     would keep the last one (embedded/manifests/tenant/addons.yaml).
//   - for a tenant, hubble.tls.auto.method cronJob, with certgen at
//     TenantAddonPriorityClass: a tenant's Cilium is a manifest in its
//     ClusterResourceSet (tenantAddons), and the chart's default method,
//     helm, writes a new CA and keys into every render, which would put
//     private keys in a ConfigMap and in the printed manifest, and change
//     the ConfigMap on every 'cluster create'. cronJob makes them inside
//     the tenant (Cilium's certgen Job), at a priority that raises no
//     pool.
func CiliumValues(lab *config.Lab, c *config.Cluster) map[string]any {
	host, port := Endpoint(lab, c)
	operator := map[string]any{"replicas": 1}
	v := map[string]any{
		"ipam":                  map[string]any{"mode": "kubernetes"},
		"ipv4NativeRoutingCIDR": c.PodCIDR,
		"k8sServiceHost":        host,
		"k8sServicePort":        port,
		"operator":              operator,
	}
	if c.Kamaji() {
		operator["priorityClassName"] = TenantAddonPriorityClass
		v["hubble"] = map[string]any{"tls": map[string]any{"auto": map[string]any{"method": "cronJob"}}}
		v["certgen"] = map[string]any{"priorityClassName": TenantAddonPriorityClass}
	} else {
		operator["nodeSelector"] = map[string]any{ControlPlaneRoleLabel: ""}
	}
	return v
}
