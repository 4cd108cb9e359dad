package cluster

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
)

// KCPGVK is the kubeadm control plane kind.
var KCPGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"}

// Description is what 'cluster describe' shows: the Cluster, its control
// plane, worker pools, machines and autoscaler, as the management cluster
// reports them.
type Description struct {
	Name         string         `json:"name"`
	Namespace    string         `json:"namespace"`
	Phase        string         `json:"phase"`
	Endpoint     string         `json:"endpoint,omitempty"`
	Conditions   []Condition    `json:"conditions,omitempty"`
	ControlPlane *ControlPlane  `json:"controlPlane,omitempty"`
	Workers      []WorkerPool   `json:"workers"`
	Machines     []Machine      `json:"machines"`
	Autoscaler   *AutoscalerRun `json:"autoscaler,omitempty"`
}

// Condition is one status condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ControlPlane is the KubeadmControlPlane's state.
type ControlPlane struct {
	Name        string      `json:"name"`
	Version     string      `json:"version"`
	Desired     int64       `json:"desired"`
	Replicas    int64       `json:"replicas"`
	Ready       int64       `json:"ready"`
	UpToDate    int64       `json:"upToDate"`
	Initialized bool        `json:"initialized"`
	Conditions  []Condition `json:"conditions,omitempty"`
}

// WorkerPool is one MachineDeployment.
type WorkerPool struct {
	Name string `json:"name"`
	// Min and Max are the autoscaler's bounds; nil for a fixed pool.
	Min *int `json:"min,omitempty"`
	Max *int `json:"max,omitempty"`
	// Desired is spec.replicas, as the autoscaler (or a fixed pool) set it.
	Desired  *int64 `json:"desired,omitempty"`
	Replicas int64  `json:"replicas"`
	Ready    int64  `json:"ready"`
	Template string `json:"template,omitempty"`
}

// Machine is one Machine and the node it became.
type Machine struct {
	Name    string `json:"name"`
	Role    string `json:"role"` // "control-plane" or the pool's name
	Phase   string `json:"phase"`
	Node    string `json:"node,omitempty"`
	Version string `json:"version,omitempty"`
}

// AutoscalerRun is the cluster's cluster-autoscaler Deployment.
type AutoscalerRun struct {
	Image     string `json:"image,omitempty"`
	Replicas  int64  `json:"replicas"`
	Ready     int64  `json:"ready"`
	Available string `json:"available"` // the Available condition: True, False or Unknown
	Message   string `json:"message,omitempty"`
}

// Describe reads the cluster's objects from the management cluster.
func Describe(ctx context.Context, o Options) (*Description, error) {
	m := o.Mgmt
	ns, name := clusterapi.Namespace(o.Name), o.Name
	cl, found, err := m.Get(ctx, kube.Ref{GVK: ClusterGVK, Namespace: ns, Name: name})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("cluster %s does not exist in namespace %s of %s; see labctl cluster list", name, ns, m.Host())
	}
	d := &Description{Name: name, Namespace: ns, Workers: []WorkerPool{}, Machines: []Machine{}}
	d.Phase = str(cl, "status", "phase")
	if d.Phase == "" {
		d.Phase = "Pending"
	}
	if host := str(cl, "spec", "controlPlaneEndpoint", "host"); host != "" {
		d.Endpoint = fmt.Sprintf("%s:%d", host, num(cl, "spec", "controlPlaneEndpoint", "port"))
	}
	d.Conditions = conditions(cl)

	if cpName := str(cl, "spec", "controlPlaneRef", "name"); cpName != "" {
		kcp, found, err := m.Get(ctx, kube.Ref{GVK: KCPGVK, Namespace: ns, Name: cpName})
		if err != nil {
			return nil, err
		}
		if found {
			init, _, _ := unstructured.NestedBool(kcp.Object, "status", "initialization", "controlPlaneInitialized")
			d.ControlPlane = &ControlPlane{
				Name: cpName, Version: str(kcp, "spec", "version"), Desired: num(kcp, "spec", "replicas"),
				Replicas: num(kcp, "status", "replicas"), Ready: num(kcp, "status", "readyReplicas"),
				UpToDate: num(kcp, "status", "upToDateReplicas"), Initialized: init, Conditions: conditions(kcp),
			}
		}
	}

	sel := clusterapi.ClusterNameLabel + "=" + name
	mds, err := m.List(ctx, MDGVK, ns, sel)
	if err != nil {
		return nil, err
	}
	for i := range mds {
		md := &mds[i]
		p := WorkerPool{Name: md.GetName(), Replicas: num(md, "status", "replicas"), Ready: num(md, "status", "readyReplicas"),
			Template: str(md, "spec", "template", "spec", "infrastructureRef", "name")}
		if r, ok, _ := unstructured.NestedInt64(md.Object, "spec", "replicas"); ok {
			p.Desired = &r
		}
		if a := md.GetAnnotations(); a[clusterapi.AnnotationMaxSize] != "" {
			lo, hi := atoi(a[clusterapi.AnnotationMinSize]), atoi(a[clusterapi.AnnotationMaxSize])
			p.Min, p.Max = &lo, &hi
		}
		d.Workers = append(d.Workers, p)
	}

	machines, err := m.List(ctx, MachineGVK, ns, sel)
	if err != nil {
		return nil, err
	}
	for i := range machines {
		mc := &machines[i]
		l := mc.GetLabels()
		role := l["cluster.x-k8s.io/deployment-name"]
		if _, cp := l["cluster.x-k8s.io/control-plane"]; cp {
			role = "control-plane"
		}
		phase := str(mc, "status", "phase")
		if phase == "" {
			phase = "Pending"
		}
		d.Machines = append(d.Machines, Machine{Name: mc.GetName(), Role: role, Phase: phase,
			Node: str(mc, "status", "nodeRef", "name"), Version: str(mc, "spec", "version")})
	}
	sort.Slice(d.Machines, func(i, j int) bool {
		a, b := d.Machines[i], d.Machines[j]
		if a.Role != b.Role {
			return a.Role == "control-plane" || (b.Role != "control-plane" && a.Role < b.Role)
		}
		return a.Name < b.Name
	})

	dep, found, err := m.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: clusterapi.AutoscalerName})
	if err != nil {
		return nil, err
	}
	if found {
		a := &AutoscalerRun{Replicas: num(dep, "status", "replicas"), Ready: num(dep, "status", "readyReplicas"), Available: "Unknown"}
		if ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers"); len(ctrs) > 0 {
			if c, ok := ctrs[0].(map[string]any); ok {
				a.Image, _ = c["image"].(string)
			}
		}
		for _, c := range conditions(dep) {
			if c.Type == "Available" {
				a.Available, a.Message = c.Status, c.Message
			}
		}
		d.Autoscaler = a
	}
	return d, nil
}

// DescribeText prints d as a tree, like clusterctl describe.
func DescribeText(w io.Writer, d *Description) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Cluster %s/%s  %s", d.Namespace, d.Name, d.Phase)
	if d.Endpoint != "" {
		fmt.Fprintf(&b, "  endpoint %s", d.Endpoint)
	}
	b.WriteString("\n")
	writeConds(&b, "│   ", d.Conditions)
	if cp := d.ControlPlane; cp != nil {
		init := "not initialized"
		if cp.Initialized {
			init = "initialized"
		}
		fmt.Fprintf(&b, "├─ ControlPlane KubeadmControlPlane/%s  %s  %d/%d ready, %d up to date, %s\n", cp.Name, cp.Version, cp.Ready, cp.Desired, cp.UpToDate, init)
		writeConds(&b, "│     ", cp.Conditions)
		writeMachines(&b, d.Machines, "control-plane")
	} else {
		b.WriteString("├─ ControlPlane: none yet\n")
	}
	for _, p := range d.Workers {
		bounds := "fixed"
		if p.Max != nil {
			bounds = fmt.Sprintf("autoscaled %d-%d", *p.Min, *p.Max)
		}
		desired := "unset"
		if p.Desired != nil {
			desired = fmt.Sprint(*p.Desired)
		}
		fmt.Fprintf(&b, "├─ Workers MachineDeployment/%s  %s  desired %s, %d replicas, %d ready  template %s\n", p.Name, bounds, desired, p.Replicas, p.Ready, p.Template)
		writeMachines(&b, d.Machines, p.Name)
	}
	if a := d.Autoscaler; a != nil {
		fmt.Fprintf(&b, "└─ Autoscaler Deployment/%s  %d/%d ready, Available=%s  %s\n", clusterapi.AutoscalerName, a.Ready, a.Replicas, a.Available, a.Image)
		if a.Message != "" {
			fmt.Fprintf(&b, "      %s\n", a.Message)
		}
	} else {
		b.WriteString("└─ Autoscaler: not deployed\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeConds(b *strings.Builder, indent string, cs []Condition) {
	for _, c := range cs {
		fmt.Fprintf(b, "%s%s=%s", indent, c.Type, c.Status)
		if c.Reason != "" {
			fmt.Fprintf(b, " (%s)", c.Reason)
		}
		if c.Message != "" {
			fmt.Fprintf(b, ": %s", strings.ReplaceAll(c.Message, "\n", " "))
		}
		b.WriteString("\n")
	}
}

func writeMachines(b *strings.Builder, ms []Machine, role string) {
	for _, m := range ms {
		if m.Role != role {
			continue
		}
		node := "no node yet"
		if m.Node != "" {
			node = "node " + m.Node
		}
		fmt.Fprintf(b, "│   └─ Machine/%s  %s  %s  %s\n", m.Name, m.Phase, node, m.Version)
	}
}

func conditions(o *unstructured.Unstructured) []Condition {
	raw, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	var out []Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := Condition{}
		c.Type, _ = m["type"].(string)
		c.Status, _ = m["status"].(string)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		out = append(out, c)
	}
	return out
}

func str(o *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(o.Object, path...)
	return s
}

func num(o *unstructured.Unstructured, path ...string) int64 {
	v, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return 0
}
