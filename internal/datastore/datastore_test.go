package datastore

import (
	"context"
	"testing"
)

// Where an endpoint leads: a StatefulSet Pod's DNS name (the kamaji-etcd
// chart's DataStore) is port-forwarded to that Pod; an address or a name
// outside the cluster is dialed as it is.
func TestEndpointTargets(t *testing.T) {
	for _, tc := range []struct {
		host, port      string
		ns, pod         string
		podPort         int
		inCluster, fail bool
	}{
		{host: "kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local", port: "2379", ns: "kamaji-system", pod: "kamaji-etcd-0", podPort: 2379, inCluster: true},
		{host: "kamaji-etcd-0.kamaji-etcd.kamaji-system.svc", port: "2379", ns: "kamaji-system", pod: "kamaji-etcd-0", podPort: 2379, inCluster: true},
		{host: "127.0.0.1", port: "2379"},
		{host: "etcd.home.lan", port: "2379"},
		{host: "kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local", port: "client", fail: true},
	} {
		ns, pod, port, in, err := target(context.Background(), nil, tc.host, tc.port)
		if (err != nil) != tc.fail || ns != tc.ns || pod != tc.pod || port != tc.podPort || in != tc.inCluster {
			t.Errorf("%s:%s leads to %q/%q:%d in cluster %v (%v); want %q/%q:%d in cluster %v (fails %v)",
				tc.host, tc.port, ns, pod, port, in, err, tc.ns, tc.pod, tc.podPort, tc.inCluster, tc.fail)
		}
	}
}

// A tenant's keys live under /<schema>/, Kamaji's buildKey: the trailing
// slash keeps tenant "a" from reading tenant "ab"'s keys.
func TestPrefix(t *testing.T) {
	if got := Prefix("tenant1_tenant1_control_plane"); got != "/tenant1_tenant1_control_plane/" {
		t.Errorf("Prefix = %q", got)
	}
}
