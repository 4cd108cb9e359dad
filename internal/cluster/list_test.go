package cluster_test

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/testing/kubefake"
)

// The rules of 'cluster list', in milliseconds against kubefake: the
// test against a real API server (cluster_test.go) stays.

func capiCluster(ns, name string, fields map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range fields {
		o.Object[k] = v
	}
	o.SetGroupVersionKind(clusterapi.ClusterGVK)
	o.SetNamespace(ns)
	o.SetName(name)
	return o
}

func machineDeployment(ns, name, cluster string, replicas int64, version, infra string, bounds *[2]int) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"version": version, "infrastructureRef": map[string]any{"kind": infra},
		}}},
		"status": map[string]any{"replicas": replicas},
	}}
	o.SetGroupVersionKind(clusterapi.MachineDeploymentGVK)
	o.SetNamespace(ns)
	o.SetName(name)
	o.SetLabels(map[string]string{clusterapi.ClusterNameLabel: cluster})
	if bounds != nil {
		o.SetAnnotations(map[string]string{
			clusterapi.AnnotationMinSize: strconv.Itoa(bounds[0]),
			clusterapi.AnnotationMaxSize: strconv.Itoa(bounds[1]),
		})
	}
	return o
}

func TestListSummarisesEachClusterAndItsPools(t *testing.T) {
	mgmt := kubefake.New(
		capiCluster("labctl-lab1", "lab1", map[string]any{
			"spec": map[string]any{"controlPlaneEndpoint": map[string]any{"host": "192.0.2.10", "port": int64(6443)}},
			"status": map[string]any{"phase": "Provisioned",
				"initialization": map[string]any{"controlPlaneInitialized": true}},
		}),
		machineDeployment("labctl-lab1", "lab1-workers", "lab1", 2, "v1.35.4", "ProxmoxMachineTemplate", &[2]int{0, 5}),
		machineDeployment("labctl-lab1", "lab1-kvm", "lab1", 1, "v1.35.4", "LibvirtMachineTemplate", &[2]int{1, 3}),
		// Another cluster's pool in the same namespace is not lab1's.
		machineDeployment("labctl-lab1", "other-workers", "other", 4, "v1.34.0", "ProxmoxMachineTemplate", nil),
		// A cluster that has nothing yet: no status, no endpoint, no pool.
		capiCluster("labctl-a", "a", nil),
		machineDeployment("labctl-b", "b-workers", "b", 3, "v1.35.4", "ProxmoxMachineTemplate", nil),
		capiCluster("labctl-b", "b", map[string]any{"status": map[string]any{"phase": "Provisioned"}}),
	)
	got, err := cluster.List(t.Context(), cluster.Options{API: mgmt})
	if err != nil {
		t.Fatal(err)
	}
	want := []cluster.Summary{
		{Name: "a", Namespace: "labctl-a", Phase: "Pending", ControlPlane: "not initialized"},
		{Name: "b", Namespace: "labctl-b", Phase: "Provisioned", ControlPlane: "not initialized", Workers: 3, Version: "v1.35.4",
			Pools: []cluster.PoolSummary{{Name: "workers", Workers: 3, Infrastructure: "ProxmoxMachineTemplate"}}},
		{Name: "lab1", Namespace: "labctl-lab1", Phase: "Provisioned", ControlPlane: "initialized", Workers: 3, Version: "v1.35.4",
			Endpoint: "192.0.2.10:6443", MinWorkers: ptr.To(1), MaxWorkers: ptr.To(8),
			Pools: []cluster.PoolSummary{
				{Name: "kvm", Workers: 1, Min: ptr.To(1), Max: ptr.To(3), Infrastructure: "LibvirtMachineTemplate"},
				{Name: "workers", Workers: 2, Min: ptr.To(0), Max: ptr.To(5), Infrastructure: "ProxmoxMachineTemplate"},
			}},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("cluster list:\n%s\nwant\n%s", g, w)
	}
}

// No cluster is an empty list, which -o json prints as [] rather than null.
func TestListOfNoClustersIsEmpty(t *testing.T) {
	mgmt := kubefake.New()
	mgmt.Serve(clusterapi.ClusterGVK)
	mgmt.Serve(clusterapi.MachineDeploymentGVK)
	got, err := cluster.List(t.Context(), cluster.Options{API: mgmt})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(got); string(b) != "[]" {
		t.Errorf("no clusters: %s, want []", b)
	}
}

// A cluster without Cluster API says what to run, and where it looked.
func TestListWithoutClusterAPISaysToInstallIt(t *testing.T) {
	_, err := cluster.List(t.Context(), cluster.Options{API: kubefake.New()})
	want := "https://fake.invalid:6443 serves no Cluster API Clusters (cluster.x-k8s.io/v1beta2); run labctl mgmt install first"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}
