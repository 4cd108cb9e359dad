package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"

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

	since *time.Time // lastTransitionTime
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

// Describe reads the cluster's object tree from the management cluster the
// way clusterctl describe discovers it (discover.go), then adds the
// autoscaler.
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
	t, err := discover(ctx, m, cl)
	if err != nil {
		return nil, fmt.Errorf("discovering the objects of cluster %s/%s: %w", ns, name, err)
	}
	d.Tree = t
	if err := addTenantControlPlane(ctx, m, ns, d.Tree); err != nil {
		return nil, err
	}

	dep, found, err := m.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: clusterapi.AutoscalerName})
	if err != nil {
		return nil, err
	}
	if found {
		d.Tree.Children = append(d.Tree.Children, autoscalerNode(dep))
	}
	return d, nil
}

// addTenantControlPlane hangs Kamaji's TenantControlPlane under a
// tenant's KamajiControlPlane (the provider names it alike): its version
// status, its Deployment's pods, its endpoint and its datastore, which
// the KamajiControlPlane does not show. A Ready TenantControlPlane says
// only that its Deployment is up (Kamaji e51909f), so the pods and the
// datastore are shown beside it.
func addTenantControlPlane(ctx context.Context, m *kube.Client, ns string, tree *Node) error {
	var kcp *Node
	for _, c := range tree.Children {
		if c.Role == "ControlPlane" && c.Kind == clusterapi.KamajiControlPlaneGVK.Kind {
			kcp = c
		}
	}
	if kcp == nil {
		return nil
	}
	served, err := m.Serves(clusterapi.TenantControlPlaneGVK)
	if err != nil || !served {
		return err
	}
	tcp, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.TenantControlPlaneGVK, Namespace: ns, Name: kcp.Name})
	if err != nil || !found {
		return err
	}
	n := node(tcp, "")
	n.Details = tenantDetails(tcp)
	kcp.Children = append(kcp.Children, n)
	return nil
}

// tenantDetails are a TenantControlPlane's version status, pods,
// endpoint and datastore.
func tenantDetails(tcp *unstructured.Unstructured) string {
	k := func(path ...string) []string { return append([]string{"status", "kubernetesResources"}, path...) }
	parts := []string{fmt.Sprintf("%s %s", str(tcp, k("version", "version")...), str(tcp, k("version", "status")...))}
	parts = append(parts, fmt.Sprintf("pods %d/%d ready", num(tcp, k("deployment", "readyReplicas")...), num(tcp, k("deployment", "replicas")...)))
	if e := str(tcp, "status", "controlPlaneEndpoint"); e != "" {
		parts = append(parts, "endpoint "+e)
	}
	ds := str(tcp, "status", "storage", "dataStoreName")
	if ds == "" {
		ds = str(tcp, "spec", "dataStore")
	}
	if ds != "" {
		s := "datastore " + ds
		if schema := str(tcp, "status", "storage", "setup", "schema"); schema != "" {
			s += " (prefix " + schema + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// node reads one object's kind, name, conditions and labctl's details. The
// Ready condition is the one shown, Available where there is no Ready, as
// clusterctl's tree.GetReadyCondition/GetAvailableCondition choose.
func node(obj *unstructured.Unstructured, role string) *Node {
	n := &Node{Kind: obj.GetKind(), Name: obj.GetName(), Role: role}
	n.Conditions = conditions(obj)
	c, which := findCondition(obj, "Ready"), "Ready"
	if c == nil {
		c, which = findCondition(obj, "Available"), "Available"
	}
	if c != nil {
		n.Ready, n.Condition, n.Reason, n.Message = c.Status, which, c.Reason, c.Message
		n.Since = c.since
	}
	n.Details = details(obj, role)
	return n
}

// details are the few fields a lab user asks for next to the conditions.
func details(o *unstructured.Unstructured, role string) string {
	switch {
	case role == "" && o.GetKind() == "Cluster":
		if p := str(o, "status", "phase"); p != "" {
			return p
		}
		return "Pending"
	case o.GetKind() == "MachineDeployment":
		var parts []string
		parts = append(parts, fmt.Sprintf("%d/%d ready", num(o, "status", "readyReplicas"), num(o, "status", "replicas")))
		if r, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas"); found && r != nil {
			parts = append(parts, fmt.Sprintf("desired %d", num(o, "spec", "replicas")))
		} else {
			parts = append(parts, "desired unset")
		}
		if a := o.GetAnnotations(); a[clusterapi.AnnotationMaxSize] != "" {
			parts = append(parts, fmt.Sprintf("autoscaled %d-%d", atoi(a[clusterapi.AnnotationMinSize]), atoi(a[clusterapi.AnnotationMaxSize])))
		} else {
			parts = append(parts, "fixed")
		}
		return strings.Join(parts, ", ")
	case o.GetKind() == "Machine" && role == "":
		phase := str(o, "status", "phase")
		if phase == "" {
			phase = "Pending"
		}
		node := "no node yet"
		if n := str(o, "status", "nodeRef", "name"); n != "" {
			node = "node " + n
		}
		return fmt.Sprintf("%s, %s, %s", phase, node, str(o, "spec", "version"))
	case role == "ControlPlane":
		// KubeadmControlPlane and KamajiControlPlane (contract v1beta2) alike.
		init, _, _ := unstructured.NestedBool(o.Object, "status", "initialization", "controlPlaneInitialized")
		s := fmt.Sprintf("%d/%d ready, %d up to date, %s", num(o, "status", "readyReplicas"), num(o, "spec", "replicas"),
			num(o, "status", "upToDateReplicas"), str(o, "spec", "version"))
		if !init {
			s += ", not initialized"
		}
		return s
	}
	return ""
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
	if c := findCondition(dep, "Available"); c != nil {
		n.Ready, n.Condition, n.Reason, n.Message, n.Since = c.Status, c.Type, c.Reason, c.Message, c.since
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

// conditions reads an object's status conditions where Cluster API's
// util/conditions.UnstructuredGetAll looks for them: status.v1beta2.conditions
// (a v1beta1-contract provider's new conditions) first, then
// status.conditions.
func conditions(o *unstructured.Unstructured) []Condition {
	raw, found, _ := unstructured.NestedSlice(o.Object, "status", "v1beta2", "conditions")
	if !found {
		raw, _, _ = unstructured.NestedSlice(o.Object, "status", "conditions")
	}
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
		if s, _ := m["lastTransitionTime"].(string); s != "" {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				t = t.UTC()
				c.since = &t
			}
		}
		out = append(out, c)
	}
	return out
}

// findCondition returns the condition of type t; nil if the object has none.
func findCondition(o *unstructured.Unstructured, t string) *Condition {
	for _, c := range conditions(o) {
		if c.Type == t {
			return &c
		}
	}
	return nil
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
