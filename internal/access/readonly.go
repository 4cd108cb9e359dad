// Package access hands out read-only kubeconfigs: a ServiceAccount bound
// to the built-in ClusterRole view (which grants no Secrets), and a
// TokenRequest token for it that expires. The owner's rule is never to use
// the admin kubeconfig just to look.
package access

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
)

// The objects labctl makes in the cluster it hands out read-only access
// to. One ServiceAccount for every read-only kubeconfig: deleting it
// refuses every token issued for it at once, since the API server checks
// that a token's ServiceAccount still exists with the UID it names
// (k8s.io/kubernetes pkg/serviceaccount/claims.go).
const (
	Name      = "labctl-readonly"
	Namespace = "kube-system"
	// ClusterRole is the built-in aggregated role for looking: every
	// resource that is not a secret or a grant of power.
	ClusterRole = "view"
)

// TTL bounds. The API server refuses a TokenRequest of less than 10
// minutes (MinTokenAgeSec in k8s.io/kubernetes
// pkg/apis/authentication/validation), and no flag lowers that.
const (
	MinTTL     = 10 * time.Minute
	DefaultTTL = time.Hour
)

var (
	saGVK  = schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}
	crbGVK = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}
)

// Options are the inputs of ReadOnly and Revoke.
type Options struct {
	IO *ui.IO
	// Admin is a kubeconfig that may create ServiceAccounts, bindings and
	// tokens: the cluster's admin one. Only its server and CA go into the
	// read-only kubeconfig.
	Admin []byte
	// What names the cluster in messages ("cluster lab1").
	What string
	// From is where Admin came from, for errors reaching the cluster.
	From kube.Origin
	// Context is the context (and cluster and user) name of the kubeconfig
	// written.
	Context string
	TTL     time.Duration
	DryRun  bool
	// RevokeCommand is the labctl command that revokes, for the message.
	RevokeCommand string
}

// Objects are the RBAC objects of read-only access.
func Objects() []*unstructured.Unstructured {
	labels := map[string]any{"app.kubernetes.io/managed-by": "labctl"}
	sa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": Name, "namespace": Namespace, "labels": labels},
	}}
	crb := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": Name, "labels": labels},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ClusterRole},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": Name, "namespace": Namespace}},
	}}
	return []*unstructured.Unstructured{sa, crb}
}

// CheckTTL refuses a TTL the API server would refuse, naming the flag.
func CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("--ttl %s: the API server issues no token for less than %s; give --ttl %s or more", ttl, MinTTL, MinTTL)
	}
	if ttl%time.Second != 0 {
		return fmt.Errorf("--ttl %s: tokens last whole seconds; give e.g. --ttl 1h", ttl)
	}
	return nil
}

// ReadOnly makes the RBAC objects (idempotently, by server-side apply),
// asks for a token of o.TTL and returns a kubeconfig that holds it, and
// when the token expires. A dry run returns no kubeconfig.
func ReadOnly(ctx context.Context, o Options) ([]byte, time.Time, error) {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if err := CheckTTL(o.TTL); err != nil {
		return nil, time.Time{}, err
	}
	admin, err := clientcmd.Load(o.Admin)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: reading its admin kubeconfig: %w", o.What, err)
	}
	cfg, err := kube.RESTConfigFromKubeconfig(o.Admin, o.From)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: reading its admin kubeconfig: %w", o.What, err)
	}
	c := kube.NewForConfig(cfg, o.What)
	objs := Objects()
	var out []byte
	var expires time.Time
	steps := []step.Step{
		{
			Name: fmt.Sprintf("bind ServiceAccount %s/%s to ClusterRole %s on %s", Namespace, Name, ClusterRole, o.What),
			Plan: func(ctx context.Context) ([]string, error) {
				cs, err := c.Plan(ctx, objs)
				return changes(cs), err
			},
			Apply: func(ctx context.Context) error {
				_, err := c.Apply(ctx, objs, kube.ApplyOptions{})
				return err
			},
		},
		{
			Name: fmt.Sprintf("request a token that expires in %s", o.TTL),
			Plan: func(context.Context) ([]string, error) {
				return []string{fmt.Sprintf("TokenRequest for ServiceAccount %s/%s, %s", Namespace, Name, o.TTL)}, nil
			},
			Apply: func(ctx context.Context) error {
				cs, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					return err
				}
				secs := int64(o.TTL / time.Second)
				tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, Name, &authenticationv1.TokenRequest{
					Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
				}, metav1.CreateOptions{})
				if err != nil {
					return fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", Namespace, Name, err)
				}
				expires = tr.Status.ExpirationTimestamp.Time
				out, err = kubeconfig(admin, o.Context, tr.Status.Token)
				return err
			},
		},
	}
	if err := (&step.Runner{IO: o.IO, DryRun: o.DryRun}).Run(ctx, steps); err != nil {
		return nil, time.Time{}, err
	}
	return out, expires, nil
}

// kubeconfig is admin's current cluster (server and CA, as admin names
// them) with token as its only credential.
func kubeconfig(admin *clientcmdapi.Config, name, token string) ([]byte, error) {
	ctx, ok := admin.Contexts[admin.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("the admin kubeconfig has no current context (%q)", admin.CurrentContext)
	}
	cl, ok := admin.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("the admin kubeconfig: context %q names cluster %q, which it does not hold", admin.CurrentContext, ctx.Cluster)
	}
	out := clientcmdapi.NewConfig()
	c := cl.DeepCopy()
	c.LocationOfOrigin = ""
	out.Clusters[name] = c
	out.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	out.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	out.CurrentContext = name
	return clientcmd.Write(*out)
}

// Revoke deletes the ServiceAccount and its binding: every read-only
// token handed out for the cluster is refused from then on.
func Revoke(ctx context.Context, o Options) error {
	cfg, err := kube.RESTConfigFromKubeconfig(o.Admin, o.From)
	if err != nil {
		return fmt.Errorf("%s: reading its admin kubeconfig: %w", o.What, err)
	}
	c := kube.NewForConfig(cfg, o.What)
	refs := []kube.Ref{
		{GVK: crbGVK, Name: Name},
		{GVK: saGVK, Namespace: Namespace, Name: Name},
	}
	var steps []step.Step
	for _, ref := range refs {
		steps = append(steps, step.Step{
			Name: "delete " + ref.String() + " on " + o.What,
			Plan: func(ctx context.Context) ([]string, error) {
				_, found, err := c.Get(ctx, ref)
				if err != nil || !found {
					return nil, err
				}
				return []string{"delete " + ref.String()}, nil
			},
			Apply: func(ctx context.Context) error {
				cc, err := c.Ctrl()
				if err != nil {
					return err
				}
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(ref.GVK)
				u.SetNamespace(ref.Namespace)
				u.SetName(ref.Name)
				if err := client.IgnoreNotFound(cc.Delete(ctx, u)); err != nil {
					return fmt.Errorf("deleting %s: %w", ref, err)
				}
				return nil
			},
		})
	}
	return (&step.Runner{IO: o.IO, DryRun: o.DryRun}).Run(ctx, steps)
}

func changes(cs []kube.Change) []string {
	var out []string
	for _, c := range kube.Changed(cs) {
		out = append(out, c.String())
	}
	return out
}

// Request is what a kubeconfig command asks of read-only access: a
// kubeconfig whose token lasts TTL, or with Revoke the end of every one.
type Request struct {
	TTL    time.Duration
	Revoke bool
}

// Run does what r asks: Revoke, or Export to where e says.
func Run(ctx context.Context, o Options, r Request, e kube.ExportOptions) error {
	o.TTL = r.TTL
	if r.Revoke {
		return Revoke(ctx, o)
	}
	return Export(ctx, o, e)
}

// Export makes a read-only kubeconfig (ReadOnly) and puts it where e says,
// as the admin one would go; e.Name is its context name.
func Export(ctx context.Context, o Options, e kube.ExportOptions) error {
	if o.Context == "" {
		o.Context = e.Name
	}
	data, expires, err := ReadOnly(ctx, o)
	if err != nil {
		return err
	}
	if o.DryRun {
		fmt.Fprintln(o.IO.Err, "dry run: no token was requested and no kubeconfig written")
		return nil
	}
	if err := kube.Export(o.IO.Out, o.IO.Err, data, e); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Err, "read-only (ClusterRole %s: no Secrets); the token expires at %s; '%s' ends every read-only token of %s at once\n",
		ClusterRole, expires.Local().Format(time.RFC3339), o.RevokeCommand, o.What)
	return nil
}
