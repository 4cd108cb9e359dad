package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// ownerMachine is the Machine owning obj, or nil while it has none.
func ownerMachine(ctx context.Context, c client.Client, obj metav1.Object) (*clusterv1.Machine, error) {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != "Machine" || groupOf(ref.APIVersion) != clusterv1.GroupVersion.Group {
			continue
		}
		m := &clusterv1.Machine{}
		err := c.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}, m)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading Machine %s: %w", ref.Name, err)
		}
		return m, nil
	}
	return nil, nil
}

// ownerCluster is the Cluster owning obj, or nil while it has none.
func ownerCluster(ctx context.Context, c client.Client, obj metav1.Object) (*clusterv1.Cluster, error) {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != "Cluster" || groupOf(ref.APIVersion) != clusterv1.GroupVersion.Group {
			continue
		}
		cl := &clusterv1.Cluster{}
		err := c.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: ref.Name}, cl)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading Cluster %s: %w", ref.Name, err)
		}
		return cl, nil
	}
	return nil, nil
}

func groupOf(apiVersion string) string {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ""
	}
	return gv.Group
}

// clusterOf is the named Cluster and its LibvirtCluster; either is nil
// when missing. lcName, from a machine's ClusterAnnotation, names the
// LibvirtCluster when it is not the Cluster's infrastructure (a pool on
// KVM hosts of a cluster on Proxmox). With the Cluster gone (a deletion),
// the LibvirtCluster is found by the cluster-name label Cluster API put on
// it.
func clusterOf(ctx context.Context, c client.Client, ns, name, lcName string) (*clusterv1.Cluster, *v1alpha1.LibvirtCluster, error) {
	if name == "" {
		return nil, nil, nil
	}
	cluster := &clusterv1.Cluster{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster)
	switch {
	case apierrors.IsNotFound(err):
		cluster = nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading Cluster %s: %w", name, err)
	}
	if lcName != "" {
		lc := &v1alpha1.LibvirtCluster{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: lcName}, lc)
		if apierrors.IsNotFound(err) {
			return cluster, nil, nil
		}
		if err != nil {
			return cluster, nil, fmt.Errorf("reading LibvirtCluster %s (annotation %s): %w", lcName, v1alpha1.ClusterAnnotation, err)
		}
		return cluster, lc, nil
	}
	if cluster != nil {
		ref := cluster.Spec.InfrastructureRef
		if ref.Kind != "LibvirtCluster" || ref.APIGroup != v1alpha1.GroupVersion.Group {
			return cluster, nil, nil
		}
		lc := &v1alpha1.LibvirtCluster{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, lc)
		if apierrors.IsNotFound(err) {
			return cluster, nil, nil
		}
		if err != nil {
			return cluster, nil, fmt.Errorf("reading LibvirtCluster %s: %w", ref.Name, err)
		}
		return cluster, lc, nil
	}
	var list v1alpha1.LibvirtClusterList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
		return nil, nil, fmt.Errorf("listing the LibvirtClusters of cluster %s: %w", name, err)
	}
	if len(list.Items) == 0 {
		return nil, nil, nil
	}
	return nil, &list.Items[0], nil
}

// labelledCluster is the Cluster a LibvirtCluster names in its
// cluster-name label when that Cluster does not reference it: a pool's
// hosts, which Cluster API neither owns nor looks at. Nil otherwise.
func labelledCluster(ctx context.Context, c client.Client, lc *v1alpha1.LibvirtCluster) (*clusterv1.Cluster, error) {
	name := lc.Labels[clusterv1.ClusterNameLabel]
	if name == "" {
		return nil, nil
	}
	cl := &clusterv1.Cluster{}
	err := c.Get(ctx, client.ObjectKey{Namespace: lc.Namespace, Name: name}, cl)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Cluster %s: %w", name, err)
	}
	if ref := cl.Spec.InfrastructureRef; ref.Kind == "LibvirtCluster" && ref.APIGroup == v1alpha1.GroupVersion.Group && ref.Name == lc.Name {
		return nil, nil // its own: the Cluster controller sets the owner
	}
	return cl, nil
}

// hasPaused says whether obj carries Cluster API's paused annotation.
func hasPaused(obj metav1.Object) bool {
	_, ok := obj.GetAnnotations()[clusterv1.PausedAnnotation]
	return ok
}
