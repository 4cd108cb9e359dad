package cluster_test

import (
	"context"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// TestAutoscalerRBACAllowsScaling applies what 'mgmt install' applies for
// every autoscaler (the shared ClusterRole) and what 'cluster create'
// applies for lab1's, then asks the real API server's RBAC authorizer, with
// SubjectAccessReviews, what lab1's autoscaler service account may do.
func TestAutoscalerRBACAllowsScaling(t *testing.T) {
	env := testbed.Start(t)
	mgmt, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	comps, err := components.Build(lab, versions.MustGet(), components.Options{LocalFiles: components.SkipLocalFiles})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	sharedRole := false
	for _, c := range comps {
		if c.Name != "cluster-autoscaler RBAC" {
			continue
		}
		objs = append(objs, c.Objects...)
		for _, o := range c.Objects {
			sharedRole = sharedRole || (o.GetKind() == "ClusterRole" && o.GetName() == clusterapi.SharedClusterRole)
		}
	}
	if !sharedRole {
		t.Fatalf("mgmt install's cluster-autoscaler RBAC has no ClusterRole %s, which every cluster's autoscaler binds", clusterapi.SharedClusterRole)
	}
	r, err := cluster.Render(lab, "lab1", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, r.Objects[0]) // Namespace lab1
	objs = append(objs, r.Autoscaler...)
	if _, err := mgmt.Apply(t.Context(), objs, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sa := "system:serviceaccount:lab1:" + clusterapi.AutoscalerName
	for _, tc := range []struct {
		attr  authv1.ResourceAttributes
		allow bool
	}{
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "list", Group: "infrastructure.cluster.x-k8s.io", Resource: "proxmoxmachinetemplates"}, true},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "get", Group: "infrastructure.cluster.x-k8s.io", Resource: "proxmoxmachinetemplates"}, true},
		// labctl's libvirt provider's templates, whose status.capacity
		// sizes a libvirt pool from zero (read through an informer).
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "list", Group: "infrastructure.labctl.dev", Resource: "libvirtmachinetemplates"}, true},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "watch", Group: "infrastructure.labctl.dev", Resource: "libvirtmachinetemplates"}, true},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "get", Group: "infrastructure.labctl.dev", Resource: "libvirtmachinetemplates"}, true},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "update", Group: "infrastructure.labctl.dev", Resource: "libvirtmachinetemplates"}, false},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "update", Group: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale"}, true},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "watch", Group: "cluster.x-k8s.io", Resource: "machines"}, true},
		// Not more than it needs: the kubeconfig comes mounted, not read;
		// its lease and status ConfigMap are in the workload cluster.
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, false},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "update", Resource: "configmaps"}, false},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "get", Resource: "secrets"}, false},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "delete", Group: "cluster.x-k8s.io", Resource: "machinedeployments"}, false},
		{authv1.ResourceAttributes{Namespace: "lab1", Verb: "update", Group: "infrastructure.cluster.x-k8s.io", Resource: "proxmoxmachinetemplates"}, false},
	} {
		sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:lab1", "system:authenticated"},
			ResourceAttributes: &tc.attr,
		}}
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allow {
			t.Errorf("%s %s %s/%s in lab1: allowed=%v, want %v (%s)", sa, tc.attr.Verb, tc.attr.Resource, tc.attr.Subresource, got.Status.Allowed, tc.allow, got.Status.Reason)
		}
	}
}
