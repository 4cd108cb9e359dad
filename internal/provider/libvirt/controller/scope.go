package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// machineScope is what one reconcile of a LibvirtMachine works on, as
// CAPMOX's pkg/scope MachineScope is: the objects read at its start, a
// patch helper that writes back what the phases changed, and what each
// phase found for the phases after it.
type machineScope struct {
	lm      *v1alpha1.LibvirtMachine
	machine *clusterv1.Machine
	cluster *clusterv1.Cluster
	lc      *v1alpha1.LibvirtCluster
	// lab is the domains' lab: the cluster's namespace/name.
	lab string

	c      client.Client
	helper *patch.Helper

	// Filled in by the phases, in order.
	name     string           // the domain's name (reconcileName)
	addr     staticAddress    // the bound address (reconcileAddress)
	userData []byte           // the bootstrap data (reconcileBootstrapData)
	hosts    []*host          // every host, connected or not (reconcileHosts)
	host     *host            // the host holding or given the domain
	vm       hypervisor.VM    // the domain, once found or defined
	found    bool             // the domain existed before this reconcile
	img      hypervisor.Image // the image on the host picked (reconcilePlacement)
}

func newMachineScope(c client.Client, lm *v1alpha1.LibvirtMachine) (*machineScope, error) {
	h, err := patch.NewHelper(lm, c)
	if err != nil {
		return nil, fmt.Errorf("LibvirtMachine %s: %w", lm.Name, err)
	}
	return &machineScope{lm: lm, c: c, helper: h}, nil
}

// condition sets VirtualMachineProvisioned, and Ready as its mirror: the
// phase that sets it owns its reason.
func (m *machineScope) condition(ok bool, reason, format string, args ...any) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	conditions.Set(m.lm, metav1.Condition{
		Type: v1alpha1.VirtualMachineProvisionedCondition, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...),
	})
	conditions.SetMirrorCondition(m.lm, m.lm, v1alpha1.VirtualMachineProvisionedCondition, conditions.TargetConditionType(v1alpha1.ReadyCondition))
}

// patch writes what changed of the LibvirtMachine (metadata, spec,
// status) now, for a phase that must record it before its next libvirt
// call, and starts the next patch from there.
func (m *machineScope) patch(ctx context.Context) error {
	if err := m.close(ctx); err != nil {
		return err
	}
	h, err := patch.NewHelper(m.lm, m.c)
	if err != nil {
		return fmt.Errorf("LibvirtMachine %s: %w", m.lm.Name, err)
	}
	m.helper = h
	return nil
}

// close writes what changed of the LibvirtMachine; the provider owns its
// two conditions. A LibvirtMachine gone once its finalizer went is no
// error.
func (m *machineScope) close(ctx context.Context) error {
	if err := m.helper.Patch(ctx, m.lm, patch.WithOwnedConditions{Conditions: []string{
		v1alpha1.ReadyCondition, v1alpha1.VirtualMachineProvisionedCondition,
	}}); err != nil {
		return fmt.Errorf("writing LibvirtMachine %s: %w", m.lm.Name, err)
	}
	return nil
}

// closeHosts ends the connections reconcileHosts made.
func (m *machineScope) closeHosts() {
	closeAll(m.hosts)
	m.hosts = nil
}
