package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/redact"
)

// defaultHostCheck is how often a LibvirtCluster's hosts are asked again
// whether they answer.
const defaultHostCheck = time.Minute

// ClusterReconciler reports a LibvirtCluster ready once every host
// answers, with each host as a failure domain.
type ClusterReconciler struct {
	Client client.Client
	Hosts  Hosts
	// Recheck is how often the hosts are asked again; zero means 1m.
	Recheck time.Duration
}

func (r *ClusterReconciler) recheck() time.Duration {
	if r.Recheck > 0 {
		return r.Recheck
	}
	return defaultHostCheck
}

// Reconcile follows Cluster API's InfraCluster contract (v1beta2).
func (r *ClusterReconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, reterr error) {
	lc := &v1alpha1.LibvirtCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, lc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	cluster, err := util.GetOwnerCluster(ctx, r.Client, lc.ObjectMeta)
	if apierrors.IsNotFound(err) {
		cluster, err = nil, nil
	}
	if err == nil && cluster == nil {
		// A pool's LibvirtCluster gets no owner: its Cluster is the one
		// its label names.
		cluster, err = labelledCluster(ctx, r.Client, lc)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if cluster == nil && lc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // the Cluster controller sets the owner
	}
	if cluster != nil && annotations.IsPaused(cluster, lc) {
		return reconcile.Result{}, nil
	}
	helper, err := patch.NewHelper(lc, r.Client)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("LibvirtCluster %s: %w", lc.Name, err)
	}
	defer func() {
		if err := helper.Patch(ctx, lc, patch.WithOwnedConditions{Conditions: []string{
			v1alpha1.ReadyCondition, v1alpha1.HostsReachableCondition,
		}}); err != nil {
			reterr = errors.Join(reterr, fmt.Errorf("writing LibvirtCluster %s: %w", lc.Name, err))
		}
	}()
	set := func(t string, ok bool, reason, format string, args ...any) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		conditions.Set(lc, metav1.Condition{Type: t, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}

	if !lc.DeletionTimestamp.IsZero() {
		// The machines need the hosts and credentials named here to
		// remove their domains: the LibvirtCluster goes last.
		var machines v1alpha1.LibvirtMachineList
		if err := r.Client.List(ctx, &machines, client.InNamespace(lc.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: lc.Labels[clusterv1.ClusterNameLabel]}); err != nil {
			return reconcile.Result{}, fmt.Errorf("listing the cluster's LibvirtMachines: %w", err)
		}
		if n := len(machines.Items); n > 0 && lc.Labels[clusterv1.ClusterNameLabel] != "" {
			set(v1alpha1.ReadyCondition, false, v1alpha1.DeletingReason, "waiting for %d LibvirtMachines to be deleted", n)
			return reconcile.Result{RequeueAfter: 5 * time.Second}, nil
		}
		controllerutil.RemoveFinalizer(lc, v1alpha1.ClusterFinalizer)
		return reconcile.Result{}, nil
	}
	if controllerutil.AddFinalizer(lc, v1alpha1.ClusterFinalizer) {
		if err := helper.Patch(ctx, lc); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer to LibvirtCluster %s: %w", lc.Name, err)
		}
		if helper, err = patch.NewHelper(lc, r.Client); err != nil {
			return reconcile.Result{}, fmt.Errorf("LibvirtCluster %s: %w", lc.Name, err)
		}
	}
	st := &lc.Status

	st.FailureDomains = nil
	for _, h := range lc.Spec.Hosts {
		st.FailureDomains = append(st.FailureDomains, clusterv1.FailureDomain{
			Name: h.Name, ControlPlane: ptr.To(ptr.Deref(h.ControlPlane, true)),
			Attributes: map[string]string{"uri": redact.URL(h.URI)},
		})
	}
	hosts := r.Hosts.connectAll(ctx, lc, "")
	defer closeAll(hosts)
	var down []string
	reason := v1alpha1.HostUnreachableReason
	for _, h := range hosts {
		err := h.err
		if err == nil {
			err = networkPresent(ctx, h, lc)
		}
		if err != nil {
			if isCredentialsError(err) {
				reason = v1alpha1.CredentialsInvalidReason
			}
			down = append(down, fmt.Sprintf("%s: %v", h.spec.Name, err))
		}
	}
	if len(down) > 0 {
		msg := fmt.Sprintf("%d of %d hosts unusable: %s", len(down), len(hosts), strings.Join(down, "; "))
		set(v1alpha1.HostsReachableCondition, false, reason, "%s", msg)
		set(v1alpha1.ReadyCondition, false, reason, "%s", msg)
		return reconcile.Result{RequeueAfter: r.recheck()}, nil
	}
	set(v1alpha1.HostsReachableCondition, true, v1alpha1.ReachableReason, "all %d hosts answer", len(hosts))
	set(v1alpha1.ReadyCondition, true, v1alpha1.ReachableReason, "all %d hosts answer", len(hosts))
	st.Initialization.Provisioned = ptr.To(true)
	return reconcile.Result{RequeueAfter: r.recheck()}, nil
}

// networkPresent checks that the cluster's libvirt network is defined and
// active on the host (a bridge is the host's own business).
func networkPresent(ctx context.Context, h *host, lc *v1alpha1.LibvirtCluster) error {
	if lc.Spec.Network.Network == "" {
		return nil
	}
	_, state, err := h.d.HostState(ctx)
	if err != nil {
		return err
	}
	if state != "active" {
		return fmt.Errorf("libvirt network %s is %s there (spec.network.network)", lc.Spec.Network.Network, state)
	}
	return nil
}
