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
func waitTenantAdmin(ctx context.Context, kubeconfig []byte, timeout time.Duration) error {
	cfg, err := kube.RESTConfigFromKubeconfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the tenant's kubeconfig: %w", err)
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

// Kamaji's CoreDNS addon in a tenant, and the field manager labctl
// annotates it as (tenantDNS).
const (
	tenantDNSNamespace    = "kube-system"
	tenantDNSDeployment   = "coredns"
	tenantDNSFieldManager = "labctl-tenant-dns"
)

// tenantDNS gives Kamaji's CoreDNS addon in the tenant the annotations
// that let the tenant's pools go to zero with it on them
// (clusterapi.TenantSystemPodAnnotations), once Kamaji has made it.
// Kamaji server-side applies its own manifest with its own field manager
// (internal/resources/addons/coredns.go, mutateDeployment), which leaves
// fields applied by another manager in place.
func tenantDNS(ctx context.Context, kubeconfig []byte, timeout time.Duration) error {
	cfg, err := kube.RESTConfigFromKubeconfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the tenant's kubeconfig: %w", err)
	}
	kc := kube.NewForConfig(cfg, "the tenant's kubeconfig")
	ref := kube.Ref{GVK: kube.DeploymentGVK, Namespace: tenantDNSNamespace, Name: tenantDNSDeployment}
	err = kc.Until(withProgress(ctx), kube.Watch{GVK: ref.GVK, Namespace: ref.Namespace, Name: ref.Name}, ref.String(), "made by Kamaji's CoreDNS addon",
		timeout, func(objs map[string]*unstructured.Unstructured) (bool, string) {
			return objs[ref.Name] != nil, "not made yet"
		})
	if err != nil {
		return fmt.Errorf("%w; see Kamaji's log: kubectl -n kamaji-system logs deploy/kamaji", err)
	}
	d := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": tenantDNSDeployment, "namespace": tenantDNSNamespace},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": clusterapi.TenantSystemPodAnnotations(),
		}}},
	}}
	if _, err := kc.Apply(ctx, []*unstructured.Unstructured{d}, kube.ApplyOptions{FieldManager: tenantDNSFieldManager}); err != nil {
		return fmt.Errorf("annotating the tenant's CoreDNS for the autoscaler: %w", err)
	}
	return nil
}
