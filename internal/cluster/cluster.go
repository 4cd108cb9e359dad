// Package cluster holds the workload-cluster use cases: create, scale,
// delete, list, describe and kubeconfig. Each builds steps from lab.yaml
// and the management cluster's state and runs them.
package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/credentials"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

var secretGVK = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}

// DefaultTimeout bounds each wait of create and delete.
const DefaultTimeout = 30 * time.Minute

// Options are what every cluster command shares.
type Options struct {
	IO   *ui.IO
	Lab  *config.Lab
	Name string
	Mgmt *kube.Client
	// API, when set, stands in for Mgmt in the use cases that only read
	// and patch objects (List, Scale): tests hand in a kubefake.Client.
	API     kube.API
	DryRun  bool
	Verbose int
	// Timeout bounds each wait; 0 means DefaultTimeout.
	Timeout time.Duration
	// KubeconfigDir is where the workload kubeconfig is written; empty
	// means the lab's state folder.
	KubeconfigDir string
}

// api is the client List and Scale call: API, else Mgmt.
func (o *Options) api() kube.API {
	if o.API != nil {
		return o.API
	}
	return o.Mgmt
}

func (o *Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// plan lists what applying objs would change, as sentences.
func plan(ctx context.Context, mgmt *kube.Client, objs []*unstructured.Unstructured) ([]string, error) {
	cs, err := mgmt.Plan(ctx, objs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range kube.Changed(cs) {
		out = append(out, c.String())
	}
	return out, nil
}

// apply server-side applies objs as field manager labctl, writing only
// those that differ from the server.
func apply(ctx context.Context, mgmt *kube.Client, objs []*unstructured.Unstructured) error {
	_, err := mgmt.Apply(withProgress(ctx), objs, kube.ApplyOptions{Progress: func(m string) { step.Progress(ctx, "%s", m) }})
	return err
}

// withProgress sends the kube package's wait reports to the step line.
func withProgress(ctx context.Context) context.Context {
	return kube.WithProgress(ctx, func(s string) { step.Progress(ctx, "%s", s) })
}

// wait is one wait of a step: the objects Watch names (one by name, or
// all of a kind matching a selector), what they are and the condition
// awaited, for the step's line and a timeout's error, and Done, which
// says whether the condition holds and, if not, where things stand.
type wait struct {
	kube.Watch
	What, Condition string
	Timeout         time.Duration
	Done            func(map[string]*unstructured.Unstructured) (bool, string)
}

// until runs the wait against the management cluster, reporting on the
// step's line.
func (w wait) until(ctx context.Context, mgmt *kube.Client) error {
	return mgmt.Until(withProgress(ctx), w.Watch, w.What, w.Condition, w.Timeout, w.Done)
}

// Render renders the named cluster of the lab, reading the credentials
// it names from this machine's files: a missing key stops create (and its
// dry run) before anything is written. cilium is a tenant's rendered
// Cilium (TenantCilium), nil for a kubeadm cluster.
func Render(lab *config.Lab, name string, cilium []byte) (*clusterapi.Rendered, error) {
	pins, err := versions.Get()
	if err != nil {
		return nil, err
	}
	return clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: name, Credentials: credentials.Files{Lab: lab}, Pins: pins, Cilium: cilium})
}

// KubeconfigPath is where create writes a workload cluster's kubeconfig.
func (o *Options) KubeconfigPath() (string, error) {
	dir := o.KubeconfigDir
	if dir == "" {
		d, err := files.StateDir(o.Lab.Metadata.Name)
		if err != nil {
			return "", err
		}
		dir = d
	}
	return filepath.Join(dir, o.Name+".kubeconfig"), nil
}

// Create applies the cluster's objects, waits until CAPI has brought the
// control plane up, writes its kubeconfig (0600), installs Cilium and
// starts the cluster's autoscaler. Every step is idempotent. A dry run
// runs the very same list: the runner only plans each step, and says of a
// wait that it would run.
func Create(ctx context.Context, o Options) error {
	run, err := newCreateRun(ctx, o)
	if err != nil {
		return err
	}
	r := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	if err := r.Run(ctx, run.steps()); err != nil {
		return fmt.Errorf("creating cluster %s: %w", o.Name, err)
	}
	if !o.DryRun {
		fmt.Fprintf(o.IO.Err, "cluster %s is up; kubeconfig: %s\n", o.Name, run.path)
	}
	return nil
}

// createRun is one 'cluster create', as kind's action context is one
// 'kind create cluster': what every step needs is made here once, and
// what a step finds on the way (the workload kubeconfig) comes from a
// lazy getter, never from a field an earlier step happened to fill.
type createRun struct {
	o      Options
	r      *clusterapi.Rendered
	cilium *Cilium
	path   string // where the workload kubeconfig is written
	tenant bool   // a Kamaji control plane

	kubeconfig step.Found[[]byte] // CAPI's, once it exists
}

func newCreateRun(ctx context.Context, o Options) (*createRun, error) {
	cl, err := o.Lab.Cluster(o.Name)
	if err != nil {
		return nil, err
	}
	cilium, err := NewCilium(o.Lab, cl)
	if err != nil {
		return nil, err
	}
	var tenantCilium []byte
	if cl.Kamaji() {
		tenantCilium, err = cilium.Manifest(ctx, cl)
		var offline *helm.UnreachableError
		if errors.As(err, &offline) && o.DryRun && ctx.Err() == nil {
			// The plan is still worth showing; the ConfigMap it lacks is named.
			fmt.Fprintf(o.IO.Err, "not rendered: %v; the plan leaves out ConfigMap %s\n", err, clusterapi.TenantCiliumName(o.Name))
		} else if err != nil {
			return nil, err
		}
	}
	r, err := Render(o.Lab, o.Name, tenantCilium)
	if err != nil {
		return nil, err
	}
	path, err := o.KubeconfigPath()
	if err != nil {
		return nil, err
	}
	return &createRun{o: o, r: r, cilium: cilium, path: path, tenant: cl.Kamaji()}, nil
}

// workloadKubeconfig is the admin kubeconfig CAPI keeps in the
// <cluster>-kubeconfig secret, read once it exists; found is false while
// CAPI has not made it yet (always so in a dry run of a new cluster).
func (c *createRun) workloadKubeconfig(ctx context.Context) (data []byte, found bool, err error) {
	return c.kubeconfig.Get(ctx, func(ctx context.Context) ([]byte, bool, error) {
		ns, name := c.r.Namespace, c.r.Name
		_, found, err := c.o.Mgmt.Get(ctx, kube.Ref{GVK: secretGVK, Namespace: ns, Name: clusterapi.KubeconfigSecret(name)})
		if err != nil || !found {
			return nil, false, err
		}
		data, err := readKubeconfig(ctx, c.o.Mgmt, ns, name)
		return data, err == nil, err
	})
}

// steps are create's steps in order, appended as the cluster calls for
// them, as kind's create.go appends its actions.
func (c *createRun) steps() []step.Step {
	m, r, o := c.o.Mgmt, c.r, c.o
	ns, name := r.Namespace, r.Name
	secret := clusterapi.KubeconfigSecret(name)
	steps := []step.Step{
		{
			// Reads only, so a dry run checks too; nothing is written
			// until every prerequisite is there.
			Name: "check the management cluster for Cluster API",
			Check: func(ctx context.Context) (string, error) {
				return "every kind and ClusterRole is there", checkPrerequisites(ctx, m, name, r.Objects, r.Autoscaler)
			},
		},
		{
			Name:  fmt.Sprintf("apply cluster %s (%d objects)", name, len(r.Objects)),
			Plan:  func(ctx context.Context) ([]string, error) { return plan(ctx, m, r.Objects) },
			Apply: func(ctx context.Context) error { return apply(ctx, m, r.Objects) },
		},
		{
			Name: "wait for infrastructure provisioned",
			Apply: func(ctx context.Context) error {
				return wait{Watch: kube.Watch{GVK: clusterapi.ClusterGVK, Namespace: ns, Name: name}, What: "Cluster " + ns + "/" + name,
					Condition: "infrastructure provisioned", Timeout: o.timeout(), Done: clusterFlag("infrastructureProvisioned")}.until(ctx, m)
			},
		},
		{
			Name: "wait for control plane initialized",
			Apply: func(ctx context.Context) error {
				return wait{Watch: kube.Watch{GVK: clusterapi.ClusterGVK, Namespace: ns, Name: name}, What: "Cluster " + ns + "/" + name,
					Condition: "control plane initialized", Timeout: o.timeout(), Done: clusterFlag("controlPlaneInitialized")}.until(ctx, m)
			},
		},
		{
			Name: "wait for kubeconfig secret " + secret,
			Apply: func(ctx context.Context) error {
				return wait{Watch: kube.Watch{GVK: secretGVK, Namespace: ns, Name: secret}, What: "Secret " + ns + "/" + secret,
					Condition: "present", Timeout: o.timeout(), Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
						s := objs[secret]
						if s == nil {
							return false, "not created yet"
						}
						v, _, _ := unstructured.NestedString(s.Object, "data", "value")
						return v != "", "present but has no value key"
					}}.until(ctx, m)
			},
		},
		{
			Name: "write kubeconfig " + c.path,
			Plan: func(ctx context.Context) ([]string, error) {
				kc, found, err := c.workloadKubeconfig(ctx)
				if err != nil {
					return nil, err
				}
				if !found {
					return []string{"write " + c.path + " (mode 0600) once Cluster API has made the kubeconfig"}, nil
				}
				if old, err := os.ReadFile(c.path); err == nil && string(old) == string(kc) {
					return nil, nil
				}
				return []string{"write " + c.path + " (mode 0600)"}, nil
			},
			Apply: c.onWorkload(func(_ context.Context, kc []byte) error { return files.WritePrivate(c.path, kc) }),
		},
	}
	if c.tenant {
		steps = append(steps, step.Step{
			Name:  "wait for the tenant's admin rights",
			Apply: c.onWorkload(func(ctx context.Context, kc []byte) error { return waitTenantAdmin(ctx, o.Name, kc, o.timeout()) }),
		}, step.Step{
			// Cilium too comes from the ClusterResourceSet, not from Helm:
			// the manifest alone makes the same tenant.
			Name:  "wait for CoreDNS and Cilium from the tenant's ClusterResourceSet",
			Apply: func(ctx context.Context) error { return waitTenantAddons(ctx, m, ns, name, o.timeout()) },
		})
	} else {
		steps = append(steps, c.ciliumStep())
	}
	if len(r.Autoscaler) > 0 {
		steps = append(steps, step.Step{
			Name:  "apply cluster-autoscaler",
			Plan:  func(ctx context.Context) ([]string, error) { return plan(ctx, m, r.Autoscaler) },
			Apply: func(ctx context.Context) error { return apply(ctx, m, r.Autoscaler) },
		})
	}
	return steps
}

// ciliumStep installs a kubeadm cluster's Cilium with Helm.
func (c *createRun) ciliumStep() step.Step {
	o := c.o
	return step.Step{
		Name: "install Cilium " + c.cilium.Release.Chart.Version,
		Plan: func(ctx context.Context) ([]string, error) {
			kc, found, err := c.workloadKubeconfig(ctx)
			if err != nil {
				return nil, err
			}
			if !found {
				return []string{"install " + c.cilium.String() + " once the kubeconfig exists"}, nil
			}
			p, err := c.cilium.Plan(ctx, kc)
			if err != nil || p == "" {
				return nil, err
			}
			return []string{p}, nil
		},
		Apply: c.onWorkload(func(ctx context.Context, kc []byte) error { return c.cilium.Install(ctx, kc, o.timeout()) }),
	}
}

// onWorkload is a step's Apply that needs the workload kubeconfig
// (requireKubeconfig) and hands it to f.
func (c *createRun) onWorkload(f func(ctx context.Context, kubeconfig []byte) error) func(context.Context) error {
	return func(ctx context.Context) error {
		kc, err := c.requireKubeconfig(ctx)
		if err != nil {
			return err
		}
		return f(ctx, kc)
	}
}

// requireKubeconfig is the workload kubeconfig for a step that changes
// things: by then the wait for its secret is over, so a missing one is an
// error that says where to look.
func (c *createRun) requireKubeconfig(ctx context.Context) ([]byte, error) {
	kc, found, err := c.workloadKubeconfig(ctx)
	if err == nil && !found {
		_, err = readKubeconfig(ctx, c.o.Mgmt, c.r.Namespace, c.r.Name)
	}
	return kc, err
}

// flagCondition is the Cluster condition Cluster API v1.12 sets beside
// each status.initialization flag.
var flagCondition = map[string]string{
	"infrastructureProvisioned": "InfrastructureReady",
	"controlPlaneInitialized":   "ControlPlaneInitialized",
}

// clusterFlag waits for a v1beta2 Cluster status.initialization flag.
func clusterFlag(flag string) func(map[string]*unstructured.Unstructured) (bool, string) {
	return func(objs map[string]*unstructured.Unstructured) (bool, string) {
		for _, cl := range objs {
			ok, _, _ := unstructured.NestedBool(cl.Object, "status", "initialization", flag)
			if ok {
				return true, ""
			}
			phase, _, _ := unstructured.NestedString(cl.Object, "status", "phase")
			if phase == "" {
				phase = "no phase yet"
			}
			now := "phase " + phase + ", " + flag + " not true yet"
			// The condition behind the flag says why, such as a KVM
			// tenant's LibvirtCluster whose hosts all refuse: that is
			// what a user needs to see while waiting, and at the timeout.
			if c := findCondition(cl, flagCondition[flag]); c != nil && c.Status != "True" && c.Message != "" {
				now += " (" + c.Type + " " + c.Reason + ": " + c.Message + ")"
			}
			return false, now
		}
		return false, "the Cluster does not exist"
	}
}

// readKubeconfig reads the admin kubeconfig CAPI stored for the cluster.
// KubeconfigOrigin is where a workload cluster's admin kubeconfig comes
// from, for the errors of every request sent with it.
func KubeconfigOrigin(name string) kube.Origin {
	return kube.Origin{
		Kubeconfig: "Secret " + clusterapi.Namespace(name) + "/" + clusterapi.KubeconfigSecret(name) + " on the management cluster",
		Status:     "labctl cluster describe " + name,
	}
}

// WorkloadConfig is the REST config of workload cluster name from its
// admin kubeconfig, whose errors name the Secret (KubeconfigOrigin).
func WorkloadConfig(kubeconfig []byte, name string) (*rest.Config, error) {
	return kube.RESTConfigFromKubeconfig(kubeconfig, KubeconfigOrigin(name))
}

func readKubeconfig(ctx context.Context, m *kube.Client, ns, name string) ([]byte, error) {
	ref := kube.Ref{GVK: secretGVK, Namespace: ns, Name: clusterapi.KubeconfigSecret(name)}
	s, found, err := m.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("cluster %s has no kubeconfig yet: secret %s/%s does not exist; is the control plane up? (labctl cluster describe %s)", name, ns, ref.Name, name)
	}
	v, _, _ := unstructured.NestedString(s.Object, "data", "value")
	if v == "" {
		return nil, fmt.Errorf("secret %s/%s has no value key", ns, ref.Name)
	}
	data, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: its value key is not base64: %w", ns, ref.Name, err)
	}
	return data, nil
}

// ErrAborted is a delete the user declined.
var ErrAborted = errors.New("aborted; nothing was deleted")
