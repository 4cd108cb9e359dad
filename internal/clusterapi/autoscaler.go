package clusterapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/labctl/labctl/embedded"
)

const (
	autoscalerManifest = "manifests/cluster-autoscaler/cluster.yaml"
	autoscalerImage    = "registry.k8s.io/autoscaling/cluster-autoscaler"
	// SharedClusterRole is the ClusterRole 'mgmt install' creates for every
	// cluster's autoscaler (embedded/manifests/mgmt/cluster-autoscaler-rbac.yaml): MachineDeployments and their scale, MachineSets,
	// Machines, MachinePools, and the machine templates for scale from zero.
	SharedClusterRole = "labctl-cluster-autoscaler-management"
	// AutoscalerName names the per-cluster autoscaler's Deployment and
	// ServiceAccount in the cluster's namespace.
	AutoscalerName = "cluster-autoscaler"
	// StartupTaint is Cilium's taint on a node until the Cilium agent Pod
	// there is Ready: the cilium-operator lifts it then (Cilium 1.18.4
	// operator/watchers/node_taint.go checkAndMarkNode; the agent never
	// does). The autoscaler must not count it against a new node.
	StartupTaint = "node.cilium.io/agent-not-ready"
	// workloadKubeconfig is where the <cluster>-kubeconfig secret's "value"
	// key is mounted.
	workloadKubeconfig = "/etc/kubernetes/workload/value"
	// autoscalerWorkloadNamespace is the workload cluster's namespace for
	// the autoscaler's lease and status ConfigMap (its --namespace).
	autoscalerWorkloadNamespace = "kube-system"
	// DefaultScheduler is kube-scheduler's name, the schedulerName the API
	// server gives a pod that names none (the inflate pods, and most).
	DefaultScheduler = "default-scheduler"
)

// AutoscalerArgs are the cluster-autoscaler flags for a cluster.
func (r *renderer) autoscalerArgs() []string {
	a, ns := r.c.Autoscaler, r.ns
	return []string{
		"--cloud-provider=clusterapi",
		"--kubeconfig=" + workloadKubeconfig,
		"--clusterapi-cloud-config-authoritative",
		fmt.Sprintf("--node-group-auto-discovery=clusterapi:namespace=%s,clusterName=%s", ns, r.c.Name),
		// --namespace is where the autoscaler keeps its leader lease, status
		// ConfigMap and events, through the client of --kubeconfig: the
		// workload cluster (cluster-autoscaler 1.35.0 main.go: the lock in
		// autoscalingOpts.ConfigNamespace on kube_util.CreateKubeClient's
		// client; --leader-elect-resource-namespace is not read). The
		// cluster's management namespace does not exist there, so it
		// never got the lease and never ran a loop.
		"--namespace=" + autoscalerWorkloadNamespace,
		"--startup-taint=" + StartupTaint,
		// Without it the first loop after pods go pending never scales
		// up. The unschedulable-pod observer starts a loop as soon as
		// kube-scheduler marks one pod Unschedulable (cluster-autoscaler
		// 1.35.0 loop/trigger.go isRecentUnschedulablePod), under a
		// second after it was created; RunOnce then skips scale-up while
		// the oldest unschedulable pod is younger than 2 s, "waiting one
		// iteration for more" (core/static_autoscaler.go:564 allPodsAreNew,
		// unschedulablePodTimeBuffer), unless --bypassed-scheduler-names is
		// set. Nothing triggers again once every pod is marked, so the
		// decision came a whole --scan-interval plus a loop later: 16 to
		// 21 s on the box, against the 15 s goal. Bypassing
		// default-scheduler skips that wait, and also counts a pod the
		// scheduler has not looked at yet (no PodScheduled condition) as
		// unschedulable; filter-out-schedulable still drops the pods that
		// fit on existing or upcoming nodes before a scale-up is planned.
		// With --allowed-scheduler-names empty, as here, pods of every
		// scheduler are still considered (flags.go parseAllowedSchedulers).
		"--bypassed-scheduler-names=" + DefaultScheduler,
		"--scan-interval=" + a.ScanInterval,
		"--scale-down-unneeded-time=" + a.ScaleDownUnneededTime,
		// A node the planner once found it could not empty (its pods had
		// nowhere to go) is skipped for this long (cluster-autoscaler
		// 1.35.0 core/scaledown/planner/planner.go categorizeNodes,
		// default 5m). The planner runs every loop, in the cooldown after
		// a scale-up too, so the first worker of a pool raised from zero,
		// seen while it held the one pod that raised it, was skipped for
		// five minutes after that pod went: the pool stopped at one
		// worker for minutes (seen on the box as "2 of 3 workers
		// removed"). The pool's own unneeded time is the wait that means
		// something to the owner.
		"--unremovable-node-recheck-timeout=" + a.ScaleDownUnneededTime,
		"--scale-down-delay-after-add=" + a.ScaleDownDelayAfterAdd,
		"--scale-down-delay-after-delete=" + a.ScaleDownDelayAfterDelete,
		"--scale-down-utilization-threshold=" + a.ScaleDownUtilizationThreshold,
		"--max-node-provision-time=" + a.MaxNodeProvisionTime,
		fmt.Sprintf("--expendable-pods-priority-cutoff=%d", ExpendableCutoff),
	}
}

// autoscaler renders the embedded per-cluster autoscaler manifests.
func (r *renderer) autoscaler() error {
	labels, err := json.Marshal(r.labels())
	if err != nil {
		return err
	}
	objs, err := renderManifest(autoscalerManifest, map[string]any{
		"Namespace":          r.ns,
		"Cluster":            r.c.Name,
		"Labels":             string(labels),
		"ClusterRole":        SharedClusterRole,
		"ClusterRoleBinding": "labctl-cluster-autoscaler-" + r.ns,
		"Image":              autoscalerImage + ":" + r.in.Pins.ClusterAutoscaler,
		"Args":               r.autoscalerArgs(),
		"KubeconfigSecret":   KubeconfigSecret(r.c.Name),
	})
	if err != nil {
		return err
	}
	r.out = append(r.out, objs...)
	return nil
}

// renderManifest fills in an embedded manifest template, whose values
// are quoted with q (JSON) or are numbers, and decodes its objects.
func renderManifest(name string, data map[string]any) ([]*unstructured.Unstructured, error) {
	raw, err := embedded.FS.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading embedded %s: %w", name, err)
	}
	q := func(s string) (string, error) {
		b, err := json.Marshal(s)
		return string(b), err
	}
	tmpl, err := template.New(name).Funcs(template.FuncMap{"q": q}).Option("missingkey=error").Parse(string(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing embedded %s: %w", name, err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("rendering embedded %s: %w", name, err)
	}
	objs, err := decodeYAML(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("rendering embedded %s: %w", name, err)
	}
	return objs, nil
}

// decodeYAML splits a multi-document YAML stream into objects.
func decodeYAML(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		out = append(out, u)
	}
}
