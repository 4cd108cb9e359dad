package cluster

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestClusterFlagSaysWhy: while a Cluster's infrastructure is not
// provisioned, the wait's line (and so its timeout error) carries the
// InfrastructureReady condition's reason and message, as Cluster API
// v1.12 wrote it for a KVM tenant whose hosts all refused; once the flag
// is true the wait is over.
func TestClusterFlagSaysWhy(t *testing.T) {
	const waiting = `
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: tenant2, namespace: tenant2}
status:
  phase: Provisioning
  conditions:
  - type: InfrastructureReady
    status: "False"
    reason: HostUnreachable
    message: "2 of 2 hosts unusable: kvm1: nothing answers on 127.0.0.1:9 (sshd)"
  - type: ControlPlaneInitialized
    status: "False"
    reason: NotInitialized
    message: Control plane not yet initialized
`
	cl := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(waiting), &cl.Object); err != nil {
		t.Fatal(err)
	}
	done, now := clusterFlag("infrastructureProvisioned")(map[string]*unstructured.Unstructured{"tenant2": cl})
	want := "phase Provisioning, infrastructureProvisioned not true yet (InfrastructureReady HostUnreachable: 2 of 2 hosts unusable: kvm1: nothing answers on 127.0.0.1:9 (sshd))"
	if done || now != want {
		t.Errorf("waiting: %v, %q\nwant false, %q", done, now, want)
	}
	if _, now := clusterFlag("controlPlaneInitialized")(map[string]*unstructured.Unstructured{"tenant2": cl}); !strings.HasSuffix(now, "(ControlPlaneInitialized NotInitialized: Control plane not yet initialized)") {
		t.Errorf("control plane: %q", now)
	}
	if err := unstructured.SetNestedField(cl.Object, true, "status", "initialization", "infrastructureProvisioned"); err != nil {
		t.Fatal(err)
	}
	if done, now := clusterFlag("infrastructureProvisioned")(map[string]*unstructured.Unstructured{"tenant2": cl}); !done || now != "" {
		t.Errorf("provisioned: %v, %q", done, now)
	}
}
