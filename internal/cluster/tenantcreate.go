package cluster

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
)

// tenantAdminPoll is how often the tenant's API server is asked again.
const tenantAdminPoll = 2 * time.Second

// waitTenantAdmin waits until the tenant's API server grants the admin
// kubeconfig the Kamaji provider wrote everything, as it asks the server
// itself (a SelfSubjectAccessReview of * on *, which every authenticated
// user may make). Kamaji e51909f reports the control plane ready, and
// the provider writes that kubeconfig, before the kubeadm phase that
// binds the admin's group to cluster-admin has run
// (internal/resources/kubeadm_phases.go, PhaseClusterAdminRBAC): until
// then each request past discovery is Forbidden, and Cilium's install
// would fail. Found on the box, where create reached Cilium first.
func waitTenantAdmin(ctx context.Context, name string, kubeconfig []byte, timeout time.Duration) error {
	cfg, err := WorkloadConfig(kubeconfig, name)
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"},
	}}
	deadline := time.Now().Add(timeout)
	for {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		var last string
		switch {
		case err == nil && r.Status.Allowed:
			return nil
		case err != nil:
			last = err.Error()
		default:
			last = "the admin is not cluster-admin yet (Kamaji's kubeadm phases have not bound it)"
		}
		step.Progress(ctx, "%s", last)
		if time.Now().After(deadline) {
			return fmt.Errorf("the tenant's API server at %s did not grant its admin kubeconfig cluster-admin within %s: %s; "+
				"see Kamaji's log: kubectl -n kamaji-system logs deploy/kamaji", cfg.Host, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tenantAdminPoll):
		}
	}
}

// waitTenantAddons waits until Cluster API's ClusterResourceSet has
// applied the tenant's addons (clusterapi.TenantAddons) inside it: its
// ResourcesApplied condition. Cluster API applies them once the control
// plane is initialized, and tries again while it cannot reach the
// tenant yet (its ClusterCache retries a failed connection after an
// interval: most of this wait on the box).
func waitTenantAddons(ctx context.Context, mgmt *kube.Client, ns, cluster string, timeout time.Duration) error {
	name := clusterapi.TenantAddonsName(cluster)
	return wait{Watch: kube.Watch{GVK: clusterapi.ClusterResourceSetGVK, Namespace: ns, Name: name},
		What: "ClusterResourceSet " + ns + "/" + name, Condition: "ResourcesApplied", Timeout: timeout,
		Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
			crs := objs[name]
			if crs == nil {
				return false, "not created yet"
			}
			c := findCondition(crs, "ResourcesApplied")
			if c == nil {
				return false, "Cluster API has not reconciled it yet"
			}
			return c.Status == "True", c.Reason + ": " + c.Message
		}}.until(ctx, mgmt)
}
