package controller_test

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
)

// A LibvirtCluster being deleted whose owner Cluster is already gone
// (deleted with --cascade=orphan, or by hand) still lets go once it has
// no machines: a missing owner is not an error that holds the finalizer.
func TestLibvirtClusterDeletedAfterItsCluster(t *testing.T) {
	s, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	lc := &v1alpha1.LibvirtCluster{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "lab1",
		Labels:            map[string]string{clusterv1.ClusterNameLabel: "lab1"},
		Finalizers:        []string{v1alpha1.ClusterFinalizer},
		DeletionTimestamp: &metav1.Time{Time: time.Now()},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: "lab1", UID: "gone",
		}},
	}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(lc).WithStatusSubresource(lc).Build()
	r := &controller.ClusterReconciler{Client: c}
	if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(lc)}); err != nil {
		t.Fatalf("reconciling a LibvirtCluster whose Cluster is gone: %v", err)
	}
	err = c.Get(t.Context(), client.ObjectKeyFromObject(lc), &v1alpha1.LibvirtCluster{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the LibvirtCluster is still there (%v): its finalizer was kept", err)
	}
}
