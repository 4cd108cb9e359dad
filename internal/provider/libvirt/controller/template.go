package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// TemplateReconciler publishes each LibvirtMachineTemplate's machine size
// in status.capacity and status.nodeInfo, where cluster-autoscaler's
// clusterapi provider looks for it to scale a MachineDeployment from zero
// (cluster-autoscaler 1.35.0,
// cloudprovider/clusterapi/clusterapi_unstructured.go,
// resourceCapacityFromInfrastructureObject: status.capacity, a map of
// quantities; nodeInfoFromInfrastructureObject: status.nodeInfo).
type TemplateReconciler struct {
	Client client.Client
}

// Capacity is what one machine of spec offers a scheduler.
func Capacity(spec v1alpha1.LibvirtMachineSpec) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(spec.CPUs), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(spec.MemoryMiB)<<20, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(spec.DiskGiB)<<30, resource.BinarySI),
	}
}

// Reconcile writes the template's status when it differs.
func (r *TemplateReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	t := &v1alpha1.LibvirtMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	want := v1alpha1.LibvirtMachineTemplateStatus{
		Capacity: Capacity(t.Spec.Template.Spec),
		// Node images are image-builder's Ubuntu for x86 KVM hosts.
		NodeInfo: v1alpha1.NodeInfo{Architecture: "amd64", OperatingSystem: "linux"},
	}
	if equality.Semantic.DeepEqual(t.Status, want) {
		return reconcile.Result{}, nil
	}
	base := t.DeepCopy()
	t.Status = want
	if err := r.Client.Status().Patch(ctx, t, client.MergeFrom(base)); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the capacity of LibvirtMachineTemplate %s: %w", t.Name, err)
	}
	return reconcile.Result{}, nil
}
