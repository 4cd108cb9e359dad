package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types and reasons. Ready is the one Cluster API mirrors into
// the Cluster's InfrastructureReady and the Machine's
// InfrastructureReady conditions; the others say which step the
// controller is at, and why it stopped there.
const (
	// ReadyCondition summarises the object: True once provisioned.
	ReadyCondition = "Ready"

	// HostsReachableCondition (LibvirtCluster) is True when every host
	// answered; False names the hosts that did not, and why.
	HostsReachableCondition = "HostsReachable"

	// VirtualMachineProvisionedCondition (LibvirtMachine) is True once the
	// domain is defined and started; False says what it waits for or why
	// it failed.
	VirtualMachineProvisionedCondition = "VirtualMachineProvisioned"
)

// Reasons.
const (
	ReachableReason       = "Reachable"
	HostUnreachableReason = "HostUnreachable"
	// CredentialsInvalidReason: a host's credentials Secret is missing or
	// lacks a key.
	CredentialsInvalidReason = "CredentialsInvalid"

	ProvisionedReason                     = "Provisioned"
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	WaitingForBootstrapDataReason         = "WaitingForBootstrapData"
	WaitingForIPAddressReason             = "WaitingForIPAddress"
	// IPPoolExhaustedReason: the claim is not fulfilled and the pool has
	// no free address.
	IPPoolExhaustedReason = "IPPoolExhausted"
	// NoHostWithRoomReason: no host of the failure domain (or of the
	// cluster) has the memory the machine asks for.
	NoHostWithRoomReason = "NoHostWithRoom"
	// ImageMissingReason: the node image volume is not on the host.
	ImageMissingReason = "ImageMissing"
	// ProvisioningFailedReason: a libvirt call failed; the message says
	// which and why. The controller retries.
	ProvisioningFailedReason = "ProvisioningFailed"
	// VirtualMachineNotFoundReason: a provisioned machine's domain is gone
	// from every host that answers; it is not made again.
	VirtualMachineNotFoundReason = "VirtualMachineNotFound"
	DeletingReason               = "Deleting"
	PausedReason                 = "Paused"
)

// GetConditions and SetConditions make the kinds Cluster API's
// conditions.Setter, which its conditions and patch packages work on.

// GetConditions returns the LibvirtCluster's conditions.
func (c *LibvirtCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the LibvirtCluster's conditions.
func (c *LibvirtCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// GetConditions returns the LibvirtMachine's conditions.
func (m *LibvirtMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the LibvirtMachine's conditions.
func (m *LibvirtMachine) SetConditions(conds []metav1.Condition) { m.Status.Conditions = conds }
