package components

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// CAPMOX v0.9.0's ProxmoxMachineTemplate webhook refuses every change of
// a template's spec (internal/webhook/proxmoxmachinetemplate_webhook.go
// ValidateUpdate: "ProxmoxMachineTemplate is immutable"), including the
// server-side dry run by which Cluster API's topology controller works
// out whether a ClusterClass template changed. Cluster API's contract has
// such webhooks skip their immutability check for a request carrying its
// topology.cluster.x-k8s.io/dry-run annotation (api/core/v1beta2
// common_types.go TopologyDryRunAnnotation, v1.12.10): the dry run then
// shows the change, and the controller makes a new template rather than
// patching the old one. Without it a tenant's pool can never change its
// machine template, so 'cluster upgrade' of a Proxmox tenant stops with
// "failed to create patch helper for ProxmoxMachineTemplate ...: ...
// ProxmoxMachineTemplate is immutable" in the Cluster's TopologyReconciled
// condition (found on the box). labctl keeps the contract for CAPMOX: its
// Provider CR patches the webhook with a match condition that leaves out
// exactly those dry runs, so every real create and update is still
// validated. The patch tests the webhook's name first, so a CAPMOX whose
// webhooks are ordered differently fails the install loudly instead of
// losing another webhook's check.
const (
	// CAPMOXValidatingWebhooks is the ValidatingWebhookConfiguration of
	// CAPMOX's release (config/webhook with the capmox- name prefix).
	CAPMOXValidatingWebhooks = "capmox-validating-webhook-configuration"
	// capmoxTemplateWebhook is the machine template's webhook in it, and
	// its index in CAPMOX v0.9.0's release.
	capmoxTemplateWebhook      = "validation.proxmoxmachinetemplate.infrastructure.cluster.x-k8s.io"
	capmoxTemplateWebhookIndex = 3
	// TopologyDryRunCondition is the match condition's name.
	TopologyDryRunCondition = "labctl-skip-topology-dry-run"
)

func capmoxTopologyDryRun(spec map[string]any) {
	path := fmt.Sprintf("/webhooks/%d", capmoxTemplateWebhookIndex)
	ops := []map[string]any{
		{"op": "test", "path": path + "/name", "value": capmoxTemplateWebhook},
		{"op": "add", "path": path + "/matchConditions", "value": []any{map[string]any{
			"name": TopologyDryRunCondition,
			"expression": "!(has(request.dryRun) && request.dryRun && has(object.metadata.annotations) && " +
				"'topology.cluster.x-k8s.io/dry-run' in object.metadata.annotations)",
		}}},
	}
	raw, _ := yaml.Marshal(ops) // plain maps: cannot fail
	addPatch(spec, map[string]any{"group": "admissionregistration.k8s.io", "version": "v1", "kind": "ValidatingWebhookConfiguration",
		"name": CAPMOXValidatingWebhooks}, string(raw))
}

// addPatch appends an RFC 6902 patch of target to a Provider CR's
// spec.patches (cluster-api-operator v0.28.0 api/v1alpha2 Patch).
func addPatch(spec map[string]any, target map[string]any, patch string) {
	patches, _ := spec["patches"].([]any)
	spec["patches"] = append(patches, map[string]any{"target": target, "patch": patch})
}
