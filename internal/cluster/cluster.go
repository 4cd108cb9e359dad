// Package cluster holds the workload-cluster use cases: create, scale,
// delete, list, describe and kubeconfig. Each builds steps from lab.yaml
// and the management cluster's state and runs them.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// Kinds the commands read.
var (
	ClusterGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}
	MDGVK      = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}
	MachineGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
	secretGVK  = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
)

// DefaultTimeout bounds each wait of create and delete.
const DefaultTimeout = 30 * time.Minute

// Options are what every cluster command shares.
type Options struct {
	IO      *ui.IO
	Lab     *config.Lab
	Name    string
	Mgmt    *kube.Client
	DryRun  bool
	Verbose int
	// Timeout bounds each wait; 0 means DefaultTimeout.
	Timeout time.Duration
	// KubeconfigDir is where the workload kubeconfig is written; empty
	// means the lab's state folder.
	KubeconfigDir string
	// Cilium installs the CNI into the workload cluster; nil skips it.
	Cilium CNIInstaller
}

// CNIInstaller installs the CNI into a workload cluster, given its
// kubeconfig. Plan returns "" when nothing would change.
type CNIInstaller interface {
	Plan(ctx context.Context, kubeconfig []byte, c *config.Cluster) (string, error)
	Install(ctx context.Context, kubeconfig []byte, c *config.Cluster) error
}

func (o *Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// scheme knows core types, so typed Secrets and unstructured CAPI objects
// go through one client.
func newClient(mgmt *kube.Client) (client.WithWatch, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("building the API scheme: %w", err)
	}
	c, err := client.NewWithWatch(mgmt.RESTConfig(), client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("creating a client for %s: %w", mgmt.Host(), err)
	}
	return c, nil
}

// SSHKeys reads the owner's public keys from management.sshPublicKeys and
// management.sshPublicKeyFile (~ is the home folder).
func SSHKeys(lab *config.Lab) ([]string, error) {
	keys := append([]string{}, lab.Management.SSHPublicKeys...)
	if f := lab.Management.SSHPublicKeyFile; f != "" {
		path := f
		if strings.HasPrefix(f, "~/") {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("reading management.sshPublicKeyFile %s: %w", f, err)
			}
			path = filepath.Join(home, f[2:])
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading management.sshPublicKeyFile: %w; the nodes need the owner's public key (or set management.sshPublicKeys)", err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				if strings.Contains(line, "PRIVATE KEY") {
					return nil, fmt.Errorf("management.sshPublicKeyFile %s holds a private key; name the .pub file", f)
				}
				keys = append(keys, line)
			}
		}
	}
	return keys, nil
}

// Render renders the named cluster of the lab.
func Render(lab *config.Lab, name string) (*clusterapi.Rendered, error) {
	keys, err := SSHKeys(lab)
	if err != nil {
		return nil, err
	}
	pins, err := versions.Get()
	if err != nil {
		return nil, err
	}
	return clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: name, SSHKeys: keys, Pins: pins})
}

// KubeconfigPath is where create writes a workload cluster's kubeconfig.
func (o *Options) KubeconfigPath() (string, error) {
	dir := o.KubeconfigDir
	if dir == "" {
		d, err := kube.StateDir(o.Lab.Metadata.Name)
		if err != nil {
			return "", err
		}
		dir = d
	}
	return filepath.Join(dir, o.Name+".kubeconfig"), nil
}

// Create applies the cluster's objects, waits until CAPI has brought the
// control plane up, writes its kubeconfig (0600), installs Cilium and
// starts the cluster's autoscaler. Every step is idempotent.
func Create(ctx context.Context, o Options) error {
	r, err := Render(o.Lab, o.Name)
	if err != nil {
		return err
	}
	c, err := newClient(o.Mgmt)
	if err != nil {
		return err
	}
	k := newKubeOps(c)
	cl := clusterOf(o.Lab, o.Name)
	ns, name := r.Namespace, r.Name
	var kubeconfig []byte
	steps := []step.Step{
		{
			Name:  fmt.Sprintf("apply cluster %s (%d objects)", name, len(r.Objects)),
			Plan:  func(ctx context.Context) ([]string, error) { return k.plan(ctx, r.Objects) },
			Apply: func(ctx context.Context) error { return k.apply(ctx, r.Objects) },
		},
		{
			Name: "wait for infrastructure provisioned",
			Apply: func(ctx context.Context) error {
				return k.until(ctx, ClusterGVK, ns, name, "Cluster "+ns+"/"+name+" infrastructure provisioned", o.timeout(), clusterFlag("infrastructureProvisioned"))
			},
		},
		{
			Name: "wait for control plane initialized",
			Apply: func(ctx context.Context) error {
				return k.until(ctx, ClusterGVK, ns, name, "Cluster "+ns+"/"+name+" control plane initialized", o.timeout(), clusterFlag("controlPlaneInitialized"))
			},
		},
		{
			Name: "wait for kubeconfig secret " + clusterapi.KubeconfigSecret(name),
			Apply: func(ctx context.Context) error {
				return k.until(ctx, secretGVK, ns, clusterapi.KubeconfigSecret(name), "Secret "+ns+"/"+clusterapi.KubeconfigSecret(name), o.timeout(),
					func(objs map[string]*unstructured.Unstructured) (bool, string) {
						s := objs[clusterapi.KubeconfigSecret(name)]
						if s == nil {
							return false, "not created yet"
						}
						v, _, _ := unstructured.NestedString(s.Object, "data", "value")
						return v != "", "present but has no value key"
					})
			},
		},
	}
	path, err := o.KubeconfigPath()
	if err != nil {
		return err
	}
	steps = append(steps, step.Step{
		Name: "write kubeconfig " + path,
		Plan: func(ctx context.Context) ([]string, error) {
			kc, err := readKubeconfig(ctx, c, ns, name)
			if err != nil {
				return nil, err
			}
			kubeconfig = kc
			if old, err := os.ReadFile(path); err == nil && string(old) == string(kc) {
				return nil, nil
			}
			return []string{"write " + path + " (mode 0600)"}, nil
		},
		Apply: func(ctx context.Context) error { return writePrivate(path, kubeconfig) },
	})
	if o.Cilium != nil {
		steps = append(steps, step.Step{
			Name: "install Cilium " + cl.CNI.Cilium,
			Plan: func(ctx context.Context) ([]string, error) {
				if kubeconfig == nil {
					return []string{"install Cilium " + cl.CNI.Cilium + " once the kubeconfig exists"}, nil
				}
				p, err := o.Cilium.Plan(ctx, kubeconfig, cl)
				if err != nil || p == "" {
					return nil, err
				}
				return []string{p}, nil
			},
			Apply: func(ctx context.Context) error { return o.Cilium.Install(ctx, kubeconfig, cl) },
		})
	}
	steps = append(steps, step.Step{
		Name:  "apply cluster-autoscaler",
		Plan:  func(ctx context.Context) ([]string, error) { return k.plan(ctx, r.Autoscaler) },
		Apply: func(ctx context.Context) error { return k.apply(ctx, r.Autoscaler) },
	})
	if o.DryRun {
		// Nothing was applied, so there is nothing to wait for: show the plan
		// of what can be known.
		steps = []step.Step{steps[0], steps[len(steps)-1]}
	}
	run := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	if err := run.Run(ctx, steps); err != nil {
		return fmt.Errorf("creating cluster %s: %w", name, err)
	}
	if !o.DryRun {
		fmt.Fprintf(o.IO.Err, "cluster %s is up; kubeconfig: %s\n", name, path)
	}
	return nil
}

func clusterOf(lab *config.Lab, name string) *config.Cluster {
	for i := range lab.Clusters {
		if lab.Clusters[i].Name == name {
			return &lab.Clusters[i]
		}
	}
	return nil
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
			return false, "phase " + phase + ", " + flag + " not true yet"
		}
		return false, "the Cluster does not exist"
	}
}

// readKubeconfig reads the admin kubeconfig CAPI stored for the cluster.
func readKubeconfig(ctx context.Context, c client.Client, ns, name string) ([]byte, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: ns, Name: clusterapi.KubeconfigSecret(name)}
	if err := c.Get(ctx, key, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cluster %s has no kubeconfig yet: secret %s/%s does not exist; is the control plane up? (labctl cluster describe %s)", name, key.Namespace, key.Name, name)
		}
		return nil, fmt.Errorf("reading secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	v := s.Data["value"]
	if len(v) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no value key", key.Namespace, key.Name)
	}
	return v, nil
}

// writePrivate writes a secret file with mode 0600 (and its folder 0700),
// through a temporary file so a reader never sees half of it.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kubeconfig-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// ErrAborted is a delete the user declined.
var ErrAborted = errors.New("aborted; nothing was deleted")
