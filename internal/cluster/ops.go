package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
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
	case o.Min != nil && *o.Min < 0:
		return fmt.Errorf("--min %d: must be 0 or more", *o.Min)
	case o.Max != nil && *o.Max < 1:
		return fmt.Errorf("--max %d: must be at least 1 so the autoscaler can add a worker", *o.Max)
	case o.Min != nil && o.Max != nil && *o.Min > *o.Max:
		return fmt.Errorf("--min %d is more than --max %d", *o.Min, *o.Max)
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
	m := o.Mgmt
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
	ann, replicas, change, upToDate, err := scaleChange(o, "MachineDeployment "+ns+"/"+mdName, md.GetAnnotations(), cur, hasReplicas)
	if err != nil {
		return err
	}
	if ann != nil {
		patch.SetAnnotations(ann)
	} else {
		_ = unstructured.SetNestedField(patch.Object, replicas, "spec", "replicas")
	}
	return runScale(ctx, o, change, upToDate, patch)
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
	newAnn, replicas, change, upToDate, err := scaleChange(o, what, ann, cur, hasReplicas)
	if err != nil {
		return err
	}
	class, _ := entry["class"].(string)
	item := map[string]any{"name": pool, "class": class}
	if newAnn != nil {
		item["metadata"] = map[string]any{"annotations": toAny(newAnn)}
	} else {
		item["replicas"] = replicas
	}
	patch := &unstructured.Unstructured{}
	patch.SetGroupVersionKind(clusterapi.ClusterGVK)
	patch.SetNamespace(ns)
	patch.SetName(name)
	_ = unstructured.SetNestedSlice(patch.Object, []any{item}, "spec", "topology", "workers", "machineDeployments")
	return runScale(ctx, o, change, upToDate, patch)
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// scaleChange is scale's rule for one pool, wherever its numbers live:
// an autoscaled pool (the bounds annotations present) gets new bounds
// and never replicas; a fixed one gets replicas. It returns the
// annotations to write (nil for a fixed pool) or the replicas, the
// sentence for the plan, and whether nothing changes.
func scaleChange(o ScaleOptions, what string, ann map[string]string, cur int64, hasReplicas bool) (map[string]string, int64, string, bool, error) {
	name := o.Name
	curMin, hasMin := ann[clusterapi.AnnotationMinSize]
	curMax, hasMax := ann[clusterapi.AnnotationMaxSize]
	autoscaled := hasMin && hasMax
	switch {
	case autoscaled && o.Replicas != nil:
		return nil, 0, "", false, fmt.Errorf("cluster %s: the workers are autoscaled (min %s, max %s), so the autoscaler sets their count; use --min and --max", name, curMin, curMax)
	case autoscaled:
		lo, hi := atoi(curMin), atoi(curMax)
		if o.Min != nil {
			lo = *o.Min
		}
		if o.Max != nil {
			hi = *o.Max
		}
		if o.Min == nil && o.Max == nil {
			return nil, 0, "", false, fmt.Errorf("cluster %s: give --min, --max or both", name)
		}
		if lo < 0 || hi < 1 || hi < lo {
			return nil, 0, "", false, fmt.Errorf("cluster %s: --min %d --max %d: need 0 <= min <= max and max >= 1", name, lo, hi)
		}
		return map[string]string{clusterapi.AnnotationMinSize: strconv.Itoa(lo), clusterapi.AnnotationMaxSize: strconv.Itoa(hi)}, 0,
			fmt.Sprintf("set worker bounds of %s to min %d, max %d (were %s, %s)", what, lo, hi, curMin, curMax),
			curMin == strconv.Itoa(lo) && curMax == strconv.Itoa(hi), nil
	case o.Min != nil || o.Max != nil:
		return nil, 0, "", false, fmt.Errorf("cluster %s: the workers are a fixed pool, not autoscaled; use --replicas, or give workers.min < workers.max in lab.yaml and run cluster create", name)
	case o.Replicas == nil:
		return nil, 0, "", false, fmt.Errorf("cluster %s: give --replicas", name)
	case *o.Replicas < 0:
		return nil, 0, "", false, fmt.Errorf("cluster %s: --replicas %d must be 0 or more", name, *o.Replicas)
	default:
		return nil, int64(*o.Replicas), fmt.Sprintf("set replicas of %s to %d (was %d)", what, *o.Replicas, cur),
			hasReplicas && cur == int64(*o.Replicas), nil
	}
}

// runScale applies patch under scale's own field manager, as one step.
func runScale(ctx context.Context, o ScaleOptions, change string, upToDate bool, patch *unstructured.Unstructured) error {
	m, name := o.Mgmt, o.Name
	what := patch.GetKind() + " " + patch.GetNamespace() + "/" + patch.GetName()
	run := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	return run.Run(ctx, []step.Step{{
		Name: "scale cluster " + name,
		Plan: func(context.Context) ([]string, error) {
			if upToDate {
				return nil, nil
			}
			return []string{change}, nil
		},
		Apply: func(ctx context.Context) error {
			// Its own field manager: applying only these fields as "labctl"
			// would drop every other field create applied.
			_, err := m.Apply(ctx, []*unstructured.Unstructured{patch}, kube.ApplyOptions{FieldManager: ScaleFieldManager})
			if err != nil {
				return fmt.Errorf("scaling %s: %w", what, err)
			}
			return nil
		},
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
	_, found, err := m.Get(ctx, clRef)
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
	run := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	return run.Run(ctx, []step.Step{
		{
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
		},
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
				return until(ctx, m, clusterapi.MachineGVK, ns, "", clusterapi.ClusterNameLabel+"="+name, "the Machines of cluster "+name, "deleted", o.timeout(),
					func(objs map[string]*unstructured.Unstructured) (bool, string) {
						return len(objs) == 0, fmt.Sprintf("%d machine(s) left", len(objs))
					})
			},
		},
		{
			Name: "wait for the Cluster to go",
			Apply: func(ctx context.Context) error {
				return until(ctx, m, clusterapi.ClusterGVK, ns, name, "", clRef.String(), "deleted", o.timeout(),
					func(objs map[string]*unstructured.Unstructured) (bool, string) {
						return len(objs) == 0, "still there"
					})
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
				return until(ctx, m, clusterapi.LibvirtClusterGVK, ns, "", labctlSelector(name), "the LibvirtClusters of cluster "+name, "deleted", o.timeout(),
					func(objs map[string]*unstructured.Unstructured) (bool, string) {
						return len(objs) == 0, fmt.Sprintf("%d left", len(objs))
					})
			},
		},
	})
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
	Workers      int64  `json:"workers"`
	MinWorkers   *int   `json:"minWorkers,omitempty"`
	MaxWorkers   *int   `json:"maxWorkers,omitempty"`
	Endpoint     string `json:"endpoint,omitempty"`
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
	served, err := o.Mgmt.Serves(clusterapi.ClusterGVK)
	if err != nil {
		return nil, err
	}
	if !served {
		return nil, fmt.Errorf("%s serves no Cluster API Clusters (%s); run labctl mgmt install first", o.Mgmt.Host(), clusterapi.ClusterGVK.GroupVersion())
	}
	cls, err := o.Mgmt.List(ctx, clusterapi.ClusterGVK, "", "")
	if err != nil {
		return nil, err
	}
	mds, err := o.Mgmt.List(ctx, clusterapi.MachineDeploymentGVK, "", "")
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
func PrintObjects(o *ui.IO, lab *config.Lab, name, format string) error {
	r, err := Render(lab, name)
	if err != nil {
		return err
	}
	// The hosts' credentials Secrets without their data, which create
	// reads from the files their annotation's hypervisor names.
	var creds []*unstructured.Unstructured
	for _, s := range r.Credentials {
		obj, err := secretObject(s)
		if err != nil {
			return err
		}
		creds = append(creds, obj)
	}
	objs := slices.Concat(r.Objects[:1], creds, r.Objects[1:], r.Autoscaler)
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
