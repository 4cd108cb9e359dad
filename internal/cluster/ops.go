package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/credentials"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// ScaleOptions are the inputs of 'cluster scale'. Nil means unchanged.
type ScaleOptions struct {
	Options
	Min, Max, Replicas *int
	// Pool is the worker pool; empty means workers, the one-pool form's.
	Pool string
}

// CheckFlags refuses what no worker pool takes, before anything is read:
// no change at all, bounds with a count, and numbers out of range.
func (o ScaleOptions) CheckFlags() error {
	switch {
	case o.Min == nil && o.Max == nil && o.Replicas == nil:
		return errors.New("give --min and --max (an autoscaled pool) or --replicas (a fixed pool)")
	case o.Replicas != nil && (o.Min != nil || o.Max != nil):
		return errors.New("--replicas sets a fixed pool's count and --min/--max an autoscaled pool's bounds; pass one kind")
	case o.Replicas != nil && *o.Replicas < 0:
		return fmt.Errorf("--replicas %d: must be 0 or more", *o.Replicas)
	}
	if o.Min == nil && o.Max == nil {
		return nil
	}
	// Each flag alone, with the other at a bound that passes: the pool's
	// own number is read later, in scaleChange.
	lo, hi := 0, 1
	if o.Min != nil {
		lo, hi = *o.Min, max(*o.Min, 1)
	}
	if o.Max != nil {
		hi = *o.Max
		if o.Min == nil {
			lo = min(0, hi)
		}
	}
	return boundsError(lo, hi, "--min")
}

// boundsError is config's bounds rule, lab.yaml's, worded for flags.
func boundsError(lo, hi int, minName string) error {
	for _, b := range config.CheckBounds(lo, hi, minName) {
		n := lo
		if b.Field == "max" {
			n = hi
		}
		return fmt.Errorf("--%s %d: %s", b.Field, n, b.Msg)
	}
	return nil
}

// Scale changes the worker bounds of an autoscaled pool, or the count of a
// fixed one. Only the annotations (or spec.replicas of a fixed pool) are
// applied, under labctl's field manager; the autoscaler keeps its
// replicas. Put the same numbers in lab.yaml, or the next create resets them.
func Scale(ctx context.Context, o ScaleOptions) error {
	if err := o.CheckFlags(); err != nil {
		return fmt.Errorf("cluster %s: %w", o.Name, err)
	}
	m := o.api()
	ns, name := clusterapi.Namespace(o.Name), o.Name
	pool := o.Pool
	if pool == "" {
		pool = clusterapi.WorkerPool
	}
	mdName := clusterapi.PoolMachineDeploymentName(name, pool)
	cl, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: ns, Name: name})
	if err != nil {
		return err
	}
	if found {
		if class, _, _ := unstructured.NestedString(cl.Object, "spec", "topology", "classRef", "name"); class != "" {
			return scaleTopology(ctx, o, cl, pool)
		}
	}
	md, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.MachineDeploymentGVK, Namespace: ns, Name: mdName})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("cluster %s has no MachineDeployment %s/%s for pool %s; was it created with labctl cluster create? (a cluster with pools names one with --pool; labctl cluster list shows them)", name, ns, mdName, pool)
	}
	patch := &unstructured.Unstructured{}
	patch.SetGroupVersionKind(clusterapi.MachineDeploymentGVK)
	patch.SetNamespace(ns)
	patch.SetName(mdName)
	cur, _, _ := unstructured.NestedInt64(md.Object, "spec", "replicas")
	_, hasReplicas, _ := unstructured.NestedFieldNoCopy(md.Object, "spec", "replicas")
	to, err := scaleChange(o, "MachineDeployment "+ns+"/"+mdName, md.GetAnnotations(), cur, hasReplicas)
	if err != nil {
		return err
	}
	if to.fixes {
		// The bounds annotations are create's (field manager labctl), so an
		// apply under scale's own manager could not take them away; a
		// merge patch can, and sets the count in the same write.
		ann := map[string]any{}
		for _, k := range autoscalerAnnotations(md.GetAnnotations()) {
			ann[k] = nil
		}
		body := map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": map[string]any{"replicas": to.replicas}}
		return runScalePatch(ctx, o, to, md, types.MergePatchType, body)
	}
	if to.ann != nil {
		patch.SetAnnotations(to.ann)
	} else {
		_ = unstructured.SetNestedField(patch.Object, to.replicas, "spec", "replicas")
	}
	return runScale(ctx, o, to.change, to.upToDate, patch)
}

// autoscalerAnnotations are the keys of ann the render writes for the
// autoscaler (bounds and the scale-from-zero capacity): what a fixed
// pool's MachineDeployment does not have.
func autoscalerAnnotations(ann map[string]string) []string {
	var keys []string
	for k := range ann {
		if k == clusterapi.AnnotationMinSize || k == clusterapi.AnnotationMaxSize || strings.HasPrefix(k, clusterapi.CapacityPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// scaleTopology scales a pool of a Cluster made from a ClusterClass (a
// tenant): the bounds live in the Cluster's
// topology.workers.machineDeployments[].metadata.annotations and a fixed
// pool's count in its replicas, which Cluster API's topology controller
// copies onto the MachineDeployment (and would put back over a change
// made there). The entry is applied alone, keyed by its name.
func scaleTopology(ctx context.Context, o ScaleOptions, cl *unstructured.Unstructured, pool string) error {
	ns, name := cl.GetNamespace(), cl.GetName()
	entry, names := clusterapi.TopologyPool(cl, pool)
	if entry == nil {
		return fmt.Errorf("cluster %s has no pool %s in its topology (it has: %s); name one with --pool", name, pool, strings.Join(names, ", "))
	}
	ann, _, _ := unstructured.NestedStringMap(entry, "metadata", "annotations")
	cur, hasReplicas, _ := unstructured.NestedInt64(entry, "replicas")
	what := fmt.Sprintf("pool %s of Cluster %s/%s (topology)", pool, ns, name)
	to, err := scaleChange(o, what, ann, cur, hasReplicas)
	if err != nil {
		return err
	}
	if to.fixes {
		// As for a MachineDeployment: the annotations are create's. A JSON
		// patch takes them out of this entry, tested by name first so a
		// list changed since the read is refused rather than patched.
		mds, _, _ := unstructured.NestedSlice(cl.Object, "spec", "topology", "workers", "machineDeployments")
		i := slices.IndexFunc(mds, func(x any) bool { m, _ := x.(map[string]any); return m["name"] == pool })
		at := fmt.Sprintf("/spec/topology/workers/machineDeployments/%d", i)
		ops := []map[string]any{{"op": "test", "path": at + "/name", "value": pool}}
		for _, k := range autoscalerAnnotations(ann) {
			ops = append(ops, map[string]any{"op": "remove", "path": at + "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")})
		}
		ops = append(ops, map[string]any{"op": "add", "path": at + "/replicas", "value": to.replicas})
		return runScalePatch(ctx, o, to, cl, types.JSONPatchType, ops)
	}
	class, _ := entry["class"].(string)
	item := map[string]any{"name": pool, "class": class}
	if to.ann != nil {
		item["metadata"] = map[string]any{"annotations": toAny(to.ann)}
	} else {
		item["replicas"] = to.replicas
	}
	patch := &unstructured.Unstructured{}
	patch.SetGroupVersionKind(clusterapi.ClusterGVK)
	patch.SetNamespace(ns)
	patch.SetName(name)
	_ = unstructured.SetNestedSlice(patch.Object, []any{item}, "spec", "topology", "workers", "machineDeployments")
	return runScale(ctx, o, to.change, to.upToDate, patch)
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// scaleTo is what scale writes to one pool.
type scaleTo struct {
	// ann are an autoscaled pool's new annotations; nil for a fixed pool,
	// which gets replicas.
	ann      map[string]string
	replicas int64
	// fixes is true when an autoscaled pool becomes a fixed one: new
	// bounds with max <= min, which config's rule (lab.yaml's) makes a
	// fixed pool of min workers. Its autoscaler annotations go.
	fixes    bool
	change   string // the sentence for the plan
	upToDate bool   // nothing changes
}

// scaleChange is scale's rule for one pool, wherever its numbers live.
// An autoscaled pool (the bounds annotations present) gets new bounds
// and never replicas, unless the new bounds are a fixed pool's by
// config's rule: then it becomes one, as the same numbers in lab.yaml
// render it. A fixed pool gets replicas.
func scaleChange(o ScaleOptions, what string, ann map[string]string, cur int64, hasReplicas bool) (scaleTo, error) {
	name := o.Name
	curMin, hasMin := ann[clusterapi.AnnotationMinSize]
	curMax, hasMax := ann[clusterapi.AnnotationMaxSize]
	autoscaled := hasMin && hasMax
	switch {
	case autoscaled && o.Replicas != nil:
		return scaleTo{}, fmt.Errorf("cluster %s: the workers are autoscaled (min %s, max %s), so the autoscaler sets their count; use --min and --max", name, curMin, curMax)
	case autoscaled:
		lo, hi := atoi(curMin), atoi(curMax)
		if o.Min != nil {
			lo = *o.Min
		}
		if o.Max != nil {
			hi = *o.Max
		}
		if o.Min == nil && o.Max == nil {
			return scaleTo{}, fmt.Errorf("cluster %s: give --min, --max or both", name)
		}
		minName := "--min"
		if o.Min == nil {
			minName = "the pool's min"
		}
		if err := boundsError(lo, hi, minName); err != nil {
			return scaleTo{}, fmt.Errorf("cluster %s: %w", name, err)
		}
		if !config.Autoscaled(lo, hi) {
			return scaleTo{replicas: int64(lo), fixes: true,
				change: fmt.Sprintf("make %s a fixed pool of %d (min %d, max %d: the autoscaler has nothing to choose; were %s, %s)", what, lo, lo, hi, curMin, curMax)}, nil
		}
		return scaleTo{ann: map[string]string{clusterapi.AnnotationMinSize: strconv.Itoa(lo), clusterapi.AnnotationMaxSize: strconv.Itoa(hi)},
			change:   fmt.Sprintf("set worker bounds of %s to min %d, max %d (were %s, %s)", what, lo, hi, curMin, curMax),
			upToDate: curMin == strconv.Itoa(lo) && curMax == strconv.Itoa(hi)}, nil
	case o.Min != nil || o.Max != nil:
		return scaleTo{}, fmt.Errorf("cluster %s: the workers are a fixed pool, not autoscaled; use --replicas, or give workers.min < workers.max in lab.yaml and run cluster create", name)
	case o.Replicas == nil:
		return scaleTo{}, fmt.Errorf("cluster %s: give --replicas", name)
	case *o.Replicas < 0:
		return scaleTo{}, fmt.Errorf("cluster %s: --replicas %d must be 0 or more", name, *o.Replicas)
	default:
		return scaleTo{replicas: int64(*o.Replicas), change: fmt.Sprintf("set replicas of %s to %d (was %d)", what, *o.Replicas, cur),
			upToDate: hasReplicas && cur == int64(*o.Replicas)}, nil
	}
}

// runScalePatch writes to obj with a patch of type pt, as one step, under
// scale's field manager.
func runScalePatch(ctx context.Context, o ScaleOptions, to scaleTo, obj *unstructured.Unstructured, pt types.PatchType, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	what := obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
	return runStep(ctx, o, to.change, to.upToDate, func(ctx context.Context) error {
		c, err := o.Mgmt.Ctrl()
		if err != nil {
			return err
		}
		target := &unstructured.Unstructured{}
		target.SetGroupVersionKind(obj.GroupVersionKind())
		target.SetNamespace(obj.GetNamespace())
		target.SetName(obj.GetName())
		if err := c.Patch(ctx, target, client.RawPatch(pt, data), client.FieldOwner(ScaleFieldManager)); err != nil {
			return fmt.Errorf("scaling %s: %w", what, err)
		}
		return nil
	})
}

// runScale applies patch under scale's own field manager, as one step.
func runScale(ctx context.Context, o ScaleOptions, change string, upToDate bool, patch *unstructured.Unstructured) error {
	what := patch.GetKind() + " " + patch.GetNamespace() + "/" + patch.GetName()
	return runStep(ctx, o, change, upToDate, func(ctx context.Context) error {
		// Its own field manager: applying only these fields as "labctl"
		// would drop every other field create applied.
		_, err := o.Mgmt.Apply(ctx, []*unstructured.Unstructured{patch}, kube.ApplyOptions{FieldManager: ScaleFieldManager})
		if err != nil {
			return fmt.Errorf("scaling %s: %w", what, err)
		}
		return nil
	})
}

// runStep runs scale's one step: change is its plan, apply its write.
func runStep(ctx context.Context, o ScaleOptions, change string, upToDate bool, apply func(context.Context) error) error {
	run := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	return run.Run(ctx, []step.Step{{
		Name: "scale cluster " + o.Name,
		Plan: func(context.Context) ([]string, error) {
			if upToDate {
				return nil, nil
			}
			return []string{change}, nil
		},
		Apply: apply,
	}})
}

// ScaleFieldManager owns what 'cluster scale' sets.
const ScaleFieldManager = "labctl-scale"

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// DeleteOptions are the inputs of 'cluster delete'.
type DeleteOptions struct {
	Options
	Yes bool
}

// Delete removes the cluster's autoscaler, deletes the Cluster and waits
// until CAPI has removed its Machines and the Cluster itself. It asks
// first unless Yes.
func Delete(ctx context.Context, o DeleteOptions) error {
	m := o.Mgmt
	ns, name := clusterapi.Namespace(o.Name), o.Name
	clRef := kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: ns, Name: name}
	depRef := kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: clusterapi.AutoscalerName}
	clObj, found, err := m.Get(ctx, clRef)
	if err != nil {
		return err
	}
	if !found {
		fmt.Fprintf(o.IO.Err, "cluster %s does not exist in namespace %s; nothing to delete\n", name, ns)
		return nil
	}
	if !o.Yes && !o.DryRun {
		ok, err := o.IO.Confirm(fmt.Sprintf("Delete cluster %s and all its VMs?", name), name)
		if err != nil {
			return err
		}
		if !ok {
			return ErrAborted
		}
	}
	c, err := m.Ctrl()
	if err != nil {
		return err
	}
	del := func(ctx context.Context, ref kube.Ref) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ref.GVK)
		u.SetNamespace(ref.Namespace)
		u.SetName(ref.Name)
		if err := client.IgnoreNotFound(c.Delete(ctx, u, client.PropagationPolicy(metav1.DeletePropagationBackground))); err != nil {
			return fmt.Errorf("deleting %s: %w", ref, err)
		}
		return nil
	}
	steps := []step.Step{{
		// First, so it cannot scale the pool back up while it goes.
		Name: "stop cluster-autoscaler",
		Plan: func(ctx context.Context) ([]string, error) {
			_, found, err := m.Get(ctx, depRef)
			if err != nil || !found {
				return nil, err
			}
			return []string{"delete " + depRef.String()}, nil
		},
		Apply: func(ctx context.Context) error { return del(ctx, depRef) },
	}}
	if clusterapi.IsTenant(clObj) {
		steps = append(steps, stopTenant(m, clObj, o.timeout()))
	}
	run := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	return run.Run(ctx, append(steps, []step.Step{
		{
			Name: "delete cluster " + name,
			Plan: func(context.Context) ([]string, error) {
				return []string{"delete " + clRef.String() + " (Cluster API deletes its machines and VMs)"}, nil
			},
			Apply: func(ctx context.Context) error { return del(ctx, clRef) },
		},
		{
			Name: "wait for the machines to go",
			Apply: func(ctx context.Context) error {
				return wait{Watch: kube.Watch{GVK: clusterapi.MachineGVK, Namespace: ns, LabelSelector: clusterapi.ClusterNameLabel + "=" + name},
					What: "the Machines of cluster " + name, Condition: "deleted", Timeout: o.timeout(),
					Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
						return len(objs) == 0, fmt.Sprintf("%d machine(s) left", len(objs))
					}}.until(ctx, m)
			},
		},
		{
			Name: "wait for the Cluster to go",
			Apply: func(ctx context.Context) error {
				return wait{Watch: kube.Watch{GVK: clusterapi.ClusterGVK, Namespace: ns, Name: name}, What: clRef.String(), Condition: "deleted", Timeout: o.timeout(),
					Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
						return len(objs) == 0, "still there"
					}}.until(ctx, m)
			},
		},
		{
			// Cluster API owns none of these, so nothing else removes
			// them; the machines needed them to go, so they go last.
			Name: "delete the cluster's libvirt hosts, credentials and address pool",
			Plan: func(ctx context.Context) ([]string, error) {
				refs, err := leftovers(ctx, m, ns, name)
				var out []string
				for _, ref := range refs {
					out = append(out, "delete "+ref.String())
				}
				return out, err
			},
			Apply: func(ctx context.Context) error {
				refs, err := leftovers(ctx, m, ns, name)
				if err != nil {
					return err
				}
				lcs := 0
				for _, ref := range refs {
					if err := del(ctx, ref); err != nil {
						return err
					}
					if ref.GVK == clusterapi.LibvirtClusterGVK {
						lcs++
					}
				}
				if lcs == 0 {
					return nil
				}
				// LibvirtClusters hold a finalizer until the provider saw
				// their machines gone.
				return wait{Watch: kube.Watch{GVK: clusterapi.LibvirtClusterGVK, Namespace: ns, LabelSelector: labctlSelector(name)},
					What: "the LibvirtClusters of cluster " + name, Condition: "deleted", Timeout: o.timeout(),
					Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
						return len(objs) == 0, fmt.Sprintf("%d left", len(objs))
					}}.until(ctx, m)
			},
		},
	}...))
}

// stopTenant scales a Kamaji tenant's control plane to zero and waits for
// its pods to go, before the Cluster is deleted. Kamaji deletes the
// tenant's data from the datastore in its finalizer while the tenant's
// kube-apiserver still runs, and that writes its leases again after:
// measured on the box, 4 keys were left under the tenant's prefix. A
// tenant made from a ClusterClass is scaled through its topology, which
// would otherwise set the KamajiControlPlane back.
func stopTenant(m *kube.Client, cl *unstructured.Unstructured, timeout time.Duration) step.Step {
	ns := cl.GetNamespace()
	cpName, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "name")
	_, topology, _ := unstructured.NestedMap(cl.Object, "spec", "topology")
	kcpRef := kube.Ref{GVK: clusterapi.KamajiControlPlaneGVK, Namespace: ns, Name: cpName}
	// Kamaji names the TenantControlPlane and its Deployment after the
	// KamajiControlPlane.
	depRef := kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: cpName}
	what := kcpRef.String()
	if topology {
		what += " through Cluster " + ns + "/" + cl.GetName() + "'s spec.topology.controlPlane.replicas"
	}
	running := func(ctx context.Context) (int64, error) {
		if cpName == "" {
			return 0, nil // the topology controller never made one
		}
		dep, found, err := m.Get(ctx, depRef)
		if err != nil || !found {
			return 0, err
		}
		n, _, _ := unstructured.NestedInt64(dep.Object, "status", "replicas")
		want, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas")
		return max(n, want), nil
	}
	return step.Step{
		Name: "stop the tenant's control plane",
		Plan: func(ctx context.Context) ([]string, error) {
			n, err := running(ctx)
			if err != nil || n == 0 {
				return nil, err
			}
			return []string{fmt.Sprintf("scale %s to 0 (%d running), so that nothing writes to the datastore after Kamaji clears the tenant's data", what, n)}, nil
		},
		Apply: func(ctx context.Context) error {
			c, err := m.Ctrl()
			if err != nil {
				return err
			}
			target, path := cl.DeepCopy(), []string{"spec", "topology", "controlPlane", "replicas"}
			if !topology {
				target = &unstructured.Unstructured{}
				target.SetGroupVersionKind(kcpRef.GVK)
				target.SetNamespace(ns)
				target.SetName(cpName)
				path = []string{"spec", "replicas"}
			}
			body := map[string]any{}
			if err := unstructured.SetNestedField(body, int64(0), path...); err != nil {
				return err
			}
			data, err := json.Marshal(body)
			if err != nil {
				return err
			}
			if err := c.Patch(ctx, target, client.RawPatch(types.MergePatchType, data)); err != nil {
				return fmt.Errorf("scaling %s to 0: %w", what, err)
			}
			return wait{Watch: kube.Watch{GVK: kube.DeploymentGVK, Namespace: ns, Name: cpName},
				What: "the tenant's control plane " + depRef.String(), Condition: "scaled to 0", Timeout: timeout,
				Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
					for _, d := range objs {
						// Pods still shutting down count too (terminatingReplicas,
						// where the API server reports it).
						n, _, _ := unstructured.NestedInt64(d.Object, "status", "replicas")
						t, _, _ := unstructured.NestedInt64(d.Object, "status", "terminatingReplicas")
						if n += t; n > 0 {
							return false, fmt.Sprintf("%d pod(s) left", n)
						}
					}
					return true, ""
				}}.until(ctx, m)
		},
	}
}

// labctlSelector picks the objects labctl rendered for a cluster.
func labctlSelector(cluster string) string {
	return clusterapi.LabelManagedBy + "=" + clusterapi.ManagedBy + "," + clusterapi.ClusterNameLabel + "=" + cluster
}

// leftovers are the objects labctl rendered for cluster that Cluster API
// does not delete with it: the LibvirtClusters of pools (and the
// Cluster's own, should it outlive the Cluster), the hosts' credentials
// Secrets and a libvirt cluster's InClusterIPPool. Kinds the management
// cluster does not serve have none.
func leftovers(ctx context.Context, m *kube.Client, ns, cluster string) ([]kube.Ref, error) {
	var refs []kube.Ref
	for _, gvk := range []schema.GroupVersionKind{clusterapi.LibvirtClusterGVK, secretGVK, clusterapi.InClusterIPPoolGVK} {
		served, err := m.Serves(gvk)
		if err != nil || !served {
			if err != nil {
				return nil, err
			}
			continue
		}
		objs, err := m.List(ctx, gvk, ns, labctlSelector(cluster))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			refs = append(refs, kube.Ref{GVK: gvk, Namespace: ns, Name: o.GetName()})
		}
	}
	return refs, nil
}

// Summary is one row of 'cluster list'.
type Summary struct {
	Name         string `json:"name"`
	Namespace    string `json:"namespace"`
	Phase        string `json:"phase"`
	Version      string `json:"version,omitempty"`
	ControlPlane string `json:"controlPlane"`
	// ControlPlaneKind is the kind of the Cluster's control plane:
	// KubeadmControlPlane (VMs) or KamajiControlPlane (a tenant's pods on
	// the management cluster); empty until the topology controller set it.
	ControlPlaneKind string `json:"controlPlaneKind,omitempty"`
	Workers          int64  `json:"workers"`
	MinWorkers       *int   `json:"minWorkers,omitempty"`
	MaxWorkers       *int   `json:"maxWorkers,omitempty"`
	Endpoint         string `json:"endpoint,omitempty"`
	// Pools are the worker pools, one per MachineDeployment, by name.
	Pools []PoolSummary `json:"pools,omitempty"`
}

// PoolSummary is one worker pool of a 'cluster list' row.
type PoolSummary struct {
	Name    string `json:"name"`
	Workers int64  `json:"workers"`
	Min     *int   `json:"min,omitempty"`
	Max     *int   `json:"max,omitempty"`
	// Infrastructure is the kind of its machine template:
	// ProxmoxMachineTemplate or LibvirtMachineTemplate.
	Infrastructure string `json:"infrastructure,omitempty"`
}

func (p PoolSummary) bounds() string {
	if p.Max == nil {
		return "fixed"
	}
	return fmt.Sprintf("%d-%d", *p.Min, *p.Max)
}

// List reads every Cluster in the management cluster.
func List(ctx context.Context, o Options) ([]Summary, error) {
	m := o.api()
	served, err := m.Serves(clusterapi.ClusterGVK)
	if err != nil {
		return nil, err
	}
	if !served {
		return nil, fmt.Errorf("%s serves no Cluster API Clusters (%s); run labctl mgmt install first", m.Host(), clusterapi.ClusterGVK.GroupVersion())
	}
	cls, err := m.List(ctx, clusterapi.ClusterGVK, "", "")
	if err != nil {
		return nil, err
	}
	mds, err := m.List(ctx, clusterapi.MachineDeploymentGVK, "", "")
	if err != nil {
		return nil, err
	}
	out := []Summary{}
	for _, cl := range cls {
		s := Summary{Name: cl.GetName(), Namespace: cl.GetNamespace()}
		s.Phase, _, _ = unstructured.NestedString(cl.Object, "status", "phase")
		if s.Phase == "" {
			s.Phase = "Pending"
		}
		host, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneEndpoint", "host")
		if port, _, _ := unstructured.NestedInt64(cl.Object, "spec", "controlPlaneEndpoint", "port"); host != "" {
			s.Endpoint = fmt.Sprintf("%s:%d", host, port)
		}
		s.ControlPlaneKind, _, _ = unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "kind")
		s.ControlPlane = "not initialized"
		if ok, _, _ := unstructured.NestedBool(cl.Object, "status", "initialization", "controlPlaneInitialized"); ok {
			s.ControlPlane = "initialized"
		}
		for _, md := range mds {
			if md.GetNamespace() != cl.GetNamespace() || md.GetLabels()[clusterapi.ClusterNameLabel] != cl.GetName() {
				continue
			}
			r, _, _ := unstructured.NestedInt64(md.Object, "status", "replicas")
			s.Workers += r
			if v, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "version"); v != "" {
				s.Version = v
			}
			p := PoolSummary{Name: strings.TrimPrefix(md.GetName(), cl.GetName()+"-"), Workers: r}
			if tp := md.GetLabels()[clusterapi.TopologyPoolLabel]; tp != "" {
				p.Name = tp
			}
			p.Infrastructure, _, _ = unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "kind")
			if a := md.GetAnnotations(); a[clusterapi.AnnotationMaxSize] != "" {
				p.Min, p.Max = ptr.To(atoi(a[clusterapi.AnnotationMinSize])), ptr.To(atoi(a[clusterapi.AnnotationMaxSize]))
				// The cluster's bounds are its autoscaled pools' together.
				s.MinWorkers = ptr.To(ptr.Deref(s.MinWorkers, 0) + *p.Min)
				s.MaxWorkers = ptr.To(ptr.Deref(s.MaxWorkers, 0) + *p.Max)
			}
			s.Pools = append(s.Pools, p)
		}
		sort.Slice(s.Pools, func(i, j int) bool { return s.Pools[i].Name < s.Pools[j].Name })
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out, nil
}

// ListText prints the summaries as a table.
func (o Options) ListText(w io.Writer, list []Summary) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "No clusters yet; create one with labctl cluster create NAME.")
		return err
	}
	rows := make([][]string, 0, len(list))
	for _, s := range list {
		bounds := "fixed"
		if s.MaxWorkers != nil {
			bounds = fmt.Sprintf("%d-%d", *s.MinWorkers, *s.MaxWorkers)
		}
		if len(s.Pools) > 1 {
			// Each pool's own: pve 0-3, kvm 0-4.
			var each []string
			for _, p := range s.Pools {
				each = append(each, p.Name+" "+p.bounds())
			}
			bounds = strings.Join(each, ", ")
		}
		rows = append(rows, []string{s.Name, s.Namespace, s.Phase, s.ControlPlane, strconv.FormatInt(s.Workers, 10), bounds, s.Version, s.Endpoint})
	}
	return o.IO.Table(w, []string{"NAME", "NAMESPACE", "PHASE", "CONTROL PLANE", "WORKERS", "AUTOSCALE", "VERSION", "ENDPOINT"}, rows)
}

// Kubeconfig returns the cluster's admin kubeconfig from the management
// cluster. Callers print it only when asked, or write it with mode 0600.
func Kubeconfig(ctx context.Context, o Options) ([]byte, error) {
	return readKubeconfig(ctx, o.Mgmt, clusterapi.Namespace(o.Name), o.Name)
}

// ContextName is the kubeconfig context 'cluster kubeconfig --merge'
// gives cluster name of lab: CAPI names every cluster's admin context
// <name>-admin@<name>, which clashes between labs.
func ContextName(lab, name string) string { return "labctl-" + lab + "-" + name }

// ExportKubeconfig prints the cluster's admin kubeconfig, writes it to a
// file or merges it into the user's kubeconfig, as e says.
func ExportKubeconfig(ctx context.Context, o Options, e kube.ExportOptions) error {
	data, err := Kubeconfig(ctx, o)
	if err != nil {
		return err
	}
	e.Name = ContextName(o.Lab.Metadata.Name, o.Name)
	return kube.Export(o.IO.Out, o.IO.Err, data, e)
}

// PrintObjects prints the objects create would apply, as yaml or json,
// without a management cluster.
func PrintObjects(ctx context.Context, o *ui.IO, lab *config.Lab, name, format string) error {
	pins, err := versions.Get()
	if err != nil {
		return err
	}
	c, err := lab.Cluster(name)
	if err != nil {
		return err
	}
	// A tenant's manifest is whole only with its Cilium: no output rather
	// than one that makes a tenant without a CNI.
	cilium, err := TenantCilium(ctx, lab, c)
	if err != nil {
		return err
	}
	// The hosts' credentials Secrets are printed without their data (the
	// annotation names the hypervisor whose files fill them), so their
	// files are not read.
	r, err := clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: name, Credentials: credentials.Withheld{Files: credentials.Files{Lab: lab}}, Pins: pins, Cilium: cilium})
	if err != nil {
		return err
	}
	objs := slices.Concat(r.Objects, r.Autoscaler)
	for i, obj := range objs {
		if obj.GetKind() == "Secret" {
			objs[i] = obj.DeepCopy()
			unstructured.RemoveNestedField(objs[i].Object, "data")
		}
	}
	if format == "json" {
		items := make([]any, len(objs))
		for i, obj := range objs {
			items[i] = obj.Object
		}
		return o.Print("json", map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, nil)
	}
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return fmt.Errorf("writing %s: %w", kube.RefOf(obj), err)
		}
		if _, err := fmt.Fprintf(o.Out, "---\n%s", data); err != nil {
			return err
		}
	}
	return nil
}
