package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

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
	cluster, err := util.GetClusterByName(ctx, c, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		cluster = nil
	case err != nil:
		return nil, nil, err
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
	cl, err := util.GetClusterByName(ctx, c, lc.Namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ref := cl.Spec.InfrastructureRef; ref.Kind == "LibvirtCluster" && ref.APIGroup == v1alpha1.GroupVersion.Group && ref.Name == lc.Name {
		return nil, nil // its own: the Cluster controller sets the owner
	}
	return cl, nil
}
