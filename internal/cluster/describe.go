package cluster

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/tree"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// KCPGVK and ClusterGVK are clusterapi's, where the kinds are spelled once.
var KCPGVK, ClusterGVK = clusterapi.KubeadmControlPlaneGVK, clusterapi.ClusterGVK

// Description is what 'cluster describe' shows: clusterctl's object tree of
// the Cluster (infrastructure, control plane, workers, machines, each with
// its conditions), plus labctl's cluster-autoscaler Deployment.
type Description struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Phase     string `json:"phase"`
	Endpoint  string `json:"endpoint,omitempty"`
	// Tree is the Cluster and what hangs off it, as clusterctl describe
	// discovers it.
	Tree *Node `json:"tree"`
}

// Node is one object of the tree.
type Node struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Role is what the object is to its parent, as clusterctl names it:
	// ClusterInfrastructure, ControlPlane, MachineInfrastructure,
	// BootstrapConfig, or labctl's Autoscaler. Empty for the rest.
	Role string `json:"role,omitempty"`
	// Ready is the status of the object's Ready condition (Available where
	// it has no Ready): True, False or Unknown; empty without either.
	Ready     string     `json:"ready,omitempty"`
	Condition string     `json:"condition,omitempty"` // Ready or Available: the condition Ready, Reason and Message come from
	Reason    string     `json:"reason,omitempty"`
	Message   string     `json:"message,omitempty"`
	Since     *time.Time `json:"since,omitempty"` // that condition's last transition
	// Details are labctl's extras: replicas, autoscaler bounds, phase, node.
	Details    string      `json:"details,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	Children   []*Node     `json:"children,omitempty"`
}

// Condition is one status condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Find returns the first node, depth first, of kind and name; nil if none.
func (n *Node) Find(kind, name string) *Node {
	if n == nil {
		return nil
	}
	if n.Kind == kind && n.Name == name {
		return n
	}
	for _, c := range n.Children {
		if f := c.Find(kind, name); f != nil {
			return f
		}
	}
	return nil
}

// describeClient is a controller-runtime client whose scheme holds what
// clusterctl's discovery reads as typed objects: the CAPI v1beta2 core types
// and CRD metadata (for the contract version labels).
func describeClient(m *kube.Client) (client.Client, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clusterv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building the API scheme: %w", err)
		}
	}
	c, err := client.New(m.RESTConfig(), client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("creating a client for %s: %w", m.Host(), err)
	}
	return c, nil
}

// Describe reads the cluster's object tree from the management cluster with
// clusterctl's discovery, then adds the autoscaler.
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
	d := &Description{Name: name, Namespace: ns}
	d.Phase = str(cl, "status", "phase")
	if d.Phase == "" {
		d.Phase = "Pending"
	}
	if host := str(cl, "spec", "controlPlaneEndpoint", "host"); host != "" {
		d.Endpoint = fmt.Sprintf("%s:%d", host, num(cl, "spec", "controlPlaneEndpoint", "port"))
	}

	c, err := describeClient(m)
	if err != nil {
		return nil, err
	}
	// Every machine on its own row: a lab has a handful, and a user wants
	// to see which one is stuck.
	t, err := tree.Discovery(ctx, c, ns, name, tree.DiscoverOptions{Echo: true})
	if err != nil {
		return nil, fmt.Errorf("discovering the objects of cluster %s/%s: %w", ns, name, err)
	}
	d.Tree = walk(t, t.GetRoot())

	dep, found, err := m.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: clusterapi.AutoscalerName})
	if err != nil {
		return nil, err
	}
	if found {
		d.Tree.Children = append(d.Tree.Children, autoscalerNode(dep))
	}
	return d, nil
}

// walk turns the object tree under obj into Nodes, children ordered as
// clusterctl prints them.
func walk(t *tree.ObjectTree, obj client.Object) *Node {
	n := node(obj)
	kids := t.GetObjectsByParent(obj.GetUID())
	sort.SliceStable(kids, func(i, j int) bool {
		a, b := kids[i], kids[j]
		if za, zb := tree.GetZOrder(a), tree.GetZOrder(b); za != zb {
			return za > zb
		}
		if ra, rb := roleRank(tree.GetMetaName(a)), roleRank(tree.GetMetaName(b)); ra != rb {
			return ra < rb
		}
		if ka, kb := kind(a), kind(b); ka != kb {
			return ka < kb
		}
		return a.GetName() < b.GetName()
	})
	for _, k := range kids {
		n.Children = append(n.Children, walk(t, k))
	}
	return n
}

func roleRank(role string) int {
	switch role {
	case "ClusterInfrastructure", "MachineInfrastructure":
		return 0
	case "ControlPlane", "BootstrapConfig":
		return 1
	case "":
		return 2
	}
	return 3
}

func kind(obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	switch obj.(type) {
	case *clusterv1.Cluster:
		return "Cluster"
	case *clusterv1.MachineDeployment:
		return "MachineDeployment"
	case *clusterv1.MachineSet:
		return "MachineSet"
	case *clusterv1.Machine:
		return "Machine"
	case *clusterv1.MachinePool:
		return "MachinePool"
	}
	return fmt.Sprintf("%T", obj)
}

// node reads one object's kind, name, conditions and labctl's details.
func node(obj client.Object) *Node {
	n := &Node{Kind: kind(obj), Name: obj.GetName(), Role: tree.GetMetaName(obj)}
	if tree.IsVirtualObject(obj) {
		n.Kind, n.Name = obj.GetName(), ""
	}
	c, which := tree.GetReadyCondition(obj), "Ready"
	if c == nil {
		c, which = tree.GetAvailableCondition(obj), "Available"
	}
	if c != nil {
		n.Ready, n.Condition, n.Reason, n.Message = string(c.Status), which, c.Reason, c.Message
		if !c.LastTransitionTime.IsZero() {
			since := c.LastTransitionTime.UTC()
			n.Since = &since
		}
	}
	for _, c := range tree.GetConditions(obj) {
		n.Conditions = append(n.Conditions, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	n.Details = details(obj)
	return n
}

// details are the few fields a lab user asks for next to the conditions.
func details(obj client.Object) string {
	switch o := obj.(type) {
	case *clusterv1.Cluster:
		if o.Status.Phase != "" {
			return o.Status.Phase
		}
		return "Pending"
	case *clusterv1.MachineDeployment:
		var parts []string
		parts = append(parts, fmt.Sprintf("%d/%d ready", deref(o.Status.ReadyReplicas), deref(o.Status.Replicas)))
		if o.Spec.Replicas != nil {
			parts = append(parts, fmt.Sprintf("desired %d", *o.Spec.Replicas))
		} else {
			parts = append(parts, "desired unset")
		}
		if a := o.GetAnnotations(); a[clusterapi.AnnotationMaxSize] != "" {
			parts = append(parts, fmt.Sprintf("autoscaled %d-%d", atoi(a[clusterapi.AnnotationMinSize]), atoi(a[clusterapi.AnnotationMaxSize])))
		} else {
			parts = append(parts, "fixed")
		}
		return strings.Join(parts, ", ")
	case *clusterv1.Machine:
		phase := o.Status.Phase
		if phase == "" {
			phase = "Pending"
		}
		node := "no node yet"
		if o.Status.NodeRef.IsDefined() {
			node = "node " + o.Status.NodeRef.Name
		}
		return fmt.Sprintf("%s, %s, %s", phase, node, o.Spec.Version)
	case *unstructured.Unstructured:
		if tree.GetObjectContract(o) == "ControlPlane" {
			init, _, _ := unstructured.NestedBool(o.Object, "status", "initialization", "controlPlaneInitialized")
			s := fmt.Sprintf("%d/%d ready, %d up to date, %s", num(o, "status", "readyReplicas"), num(o, "spec", "replicas"),
				num(o, "status", "upToDateReplicas"), str(o, "spec", "version"))
			if !init {
				s += ", not initialized"
			}
			return s
		}
	}
	return ""
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// autoscalerNode is labctl's cluster-autoscaler Deployment as a tree node.
func autoscalerNode(dep *unstructured.Unstructured) *Node {
	n := &Node{Kind: "Deployment", Name: dep.GetName(), Role: "Autoscaler"}
	image := ""
	if ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers"); len(ctrs) > 0 {
		if c, ok := ctrs[0].(map[string]any); ok {
			image, _ = c["image"].(string)
		}
	}
	n.Details = fmt.Sprintf("%d/%d ready, %s", num(dep, "status", "readyReplicas"), num(dep, "status", "replicas"), image)
	n.Conditions = conditions(dep)
	n.Ready = "Unknown"
	for _, c := range n.Conditions {
		if c.Type == "Available" {
			n.Ready, n.Condition, n.Reason, n.Message = c.Status, c.Type, c.Reason, c.Message
		}
	}
	raw, _, _ := unstructured.NestedSlice(dep.Object, "status", "conditions")
	for _, r := range raw {
		if m, ok := r.(map[string]any); ok && m["type"] == "Available" {
			if s, _ := m["lastTransitionTime"].(string); s != "" {
				if t, err := time.Parse(time.RFC3339, s); err == nil {
					n.Since = &t
				}
			}
		}
	}
	return n
}

// DescribeHeaders are the columns of the text tree.
var DescribeHeaders = []string{"NAME", "READY", "REASON", "SINCE", "DETAILS", "MESSAGE"}

// DescribeRows lays the tree out as rows, like clusterctl describe cluster:
// the first column draws the tree, a multi-line condition message continues
// on the rows below its object.
func DescribeRows(d *Description, now time.Time) [][]string {
	var rows [][]string
	var add func(n *Node, prefix, childPrefix string)
	add = func(n *Node, prefix, childPrefix string) {
		label := n.Kind
		if n.Name != "" {
			label += "/" + n.Name
		}
		if n.Role != "" {
			label = n.Role + " - " + label
		}
		since := ""
		if n.Since != nil {
			since = duration.HumanDuration(now.Sub(*n.Since))
		}
		lines := strings.Split(strings.TrimSpace(n.Message), "\n")
		rows = append(rows, []string{prefix + label, n.Ready, n.Reason, since, n.Details, strings.TrimSpace(lines[0])})
		cont := childPrefix
		if len(n.Children) > 0 {
			cont += "│ "
		} else {
			cont += "  "
		}
		for _, l := range lines[1:] {
			rows = append(rows, []string{strings.TrimRight(cont, " "), "", "", "", "", strings.TrimSpace(l)})
		}
		for i, c := range n.Children {
			if i == len(n.Children)-1 {
				add(c, childPrefix+"└─", childPrefix+"  ")
			} else {
				add(c, childPrefix+"├─", childPrefix+"│ ")
			}
		}
	}
	if d.Tree != nil {
		add(d.Tree, "", "")
	}
	return rows
}

// DescribeText prints d as clusterctl describe does: a line for the
// cluster, then the object tree as a table.
func DescribeText(s *ui.IO, w io.Writer, d *Description) error {
	head := fmt.Sprintf("Cluster %s/%s  %s", d.Namespace, d.Name, d.Phase)
	if d.Endpoint != "" {
		head += "  endpoint " + d.Endpoint
	}
	if _, err := io.WriteString(w, head+"\n\n"); err != nil {
		return err
	}
	return s.Table(w, DescribeHeaders, DescribeRows(d, time.Now()))
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
