package box

import (
	"context"
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
)

// TenantKubeconfigs finds, for the VM-boot sim
// (bootsim.WithHostedControlPlanes), the admin kubeconfig of the tenant
// whose endpoint is endpoint, for its workers to join: Kamaji runs the
// tenant's control plane, and its provider writes the kubeconfig Secret.
// Only tenants: a kubeadm cluster's control plane is the sim's own. mgmt
// is called on each lookup and may return nil while the box is starting.
func TenantKubeconfigs(mgmt func() *kube.Client) func(ctx context.Context, endpoint string) ([]byte, bool, error) {
	return func(ctx context.Context, endpoint string) ([]byte, bool, error) {
		kc := mgmt()
		if kc == nil {
			return nil, false, nil
		}
		cls, err := kc.List(ctx, clusterapi.ClusterGVK, "", "")
		if err != nil {
			return nil, false, err
		}
		for _, c := range cls {
			host, _, _ := unstructured.NestedString(c.Object, "spec", "controlPlaneEndpoint", "host")
			port, _, _ := unstructured.NestedInt64(c.Object, "spec", "controlPlaneEndpoint", "port")
			if !clusterapi.IsTenant(&c) || net.JoinHostPort(host, strconv.FormatInt(port, 10)) != endpoint {
				continue
			}
			data, err := cluster.Kubeconfig(ctx, cluster.Options{Mgmt: kc, Name: c.GetName()})
			if err != nil {
				return nil, false, err
			}
			return data, true, nil
		}
		return nil, false, nil
	}
}
