// Package kube is labctl's adapter to Kubernetes API servers: it loads a
// kubeconfig, asks the server for its version, inspects CRDs, applies
// objects with server-side apply (field manager labctl) and waits for
// conditions by watching.
//
// Nothing here runs at package init beyond what its imports do: the scheme
// and clients are built on first use, so commands that never talk to a
// cluster (labctl version, config ...) pay nothing for them.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// warnings prints API server warnings (deprecations and the like) to
// stderr once each, as kubectl does, rather than through controller-runtime's
// logger, which labctl does not set up.
var warnings = rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true})

// Client talks to one API server named by a kubeconfig file.
type Client struct {
	// Kubeconfig is the file the client was loaded from.
	Kubeconfig string
	// Context is the kubeconfig context in use.
	Context string

	config *rest.Config

	once    sync.Once
	ctrl    client.Client
	ctrlErr error

	dynOnce   sync.Once
	dynClient dynamic.Interface
	mapper    meta.RESTMapper
	dynErr    error
}

// Client-side rate limits. client-go's default (5 requests/s, bursts of 10)
// would make a no-op re-run of 'mgmt install' wait on itself; kubectl
// lifted its own limits for the same reason.
const (
	clientQPS   = 100
	clientBurst = 200
)

func tune(cfg *rest.Config) {
	if cfg.UserAgent == "" {
		cfg.UserAgent = "labctl"
	}
	if cfg.WarningHandler == nil && cfg.WarningHandlerWithContext == nil {
		cfg.WarningHandler = warnings
	}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = clientQPS, clientBurst
	}
	if cfg.Dial == nil {
		cfg.Dial = dial
	}
}

// Connect loads the kubeconfig at path (its current context) and returns a
// client for that server. path may be a list of files, as $KUBECONFIG
// holds them; they are merged as kubectl merges them. It does not contact
// the server. TLS verification is whatever the kubeconfig says; labctl
// never turns it off.
func Connect(path string) (*Client, error) {
	if path == "" {
		return nil, errors.New("loading kubeconfig: no file given")
	}
	files := filepath.SplitList(path)
	found := 0
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			found++
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", f, err)
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("loading kubeconfig %s: file does not exist", path)
	}
	raw, err := loadRaw(path)
	if err != nil {
		// clientcmd already names the file in most of its errors.
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	cc := clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent = "labctl"
	tune(cfg)
	FileOrigin(path).explain(cfg)
	// clientcmd already resolved relative certificate paths against each
	// file's folder; keep the files' absolute paths for reports.
	if len(files) == 1 {
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
	}
	return &Client{Kubeconfig: path, Context: raw.CurrentContext, config: cfg}, nil
}

// NewForConfig returns a client for an already built REST config (the test
// bed uses it); kubeconfig names it in errors.
func NewForConfig(cfg *rest.Config, kubeconfig string) *Client {
	cfg = rest.CopyConfig(cfg)
	tune(cfg)
	return &Client{Kubeconfig: kubeconfig, config: cfg}
}

// Host is the API server URL.
func (c *Client) Host() string { return c.config.Host }

// Insecure reports whether the kubeconfig turns TLS verification off.
func (c *Client) Insecure() bool { return c.config.Insecure }

// RESTConfig returns a copy of the client's REST config.
func (c *Client) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// ServerVersion asks the API server for its version.
func (c *Client) ServerVersion(ctx context.Context) (*version.Info, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.config)
	if err != nil {
		return nil, fmt.Errorf("asking %s for its version: %w", c.config.Host, err)
	}
	body, err := dc.RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("asking %s for its version: %w", c.config.Host, err)
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("asking %s for its version: decoding the answer: %w", c.config.Host, err)
	}
	return &info, nil
}

// Ctrl returns a controller-runtime client that knows the apiextensions v1
// types, built on first use. Later adapters widen its scheme as they need.
func (c *Client) Ctrl() (client.Client, error) {
	c.once.Do(func() {
		s := runtime.NewScheme()
		if err := apiextensionsv1.AddToScheme(s); err != nil {
			c.ctrlErr = fmt.Errorf("building the API scheme: %w", err)
			return
		}
		c.ctrl, c.ctrlErr = client.New(c.config, client.Options{Scheme: s})
		if c.ctrlErr != nil {
			c.ctrlErr = fmt.Errorf("creating a client for %s: %w", c.config.Host, c.ctrlErr)
		}
	})
	return c.ctrl, c.ctrlErr
}

// CRD is what labctl needs to know about one CustomResourceDefinition.
type CRD struct {
	// Name is <plural>.<group>, e.g. clusters.cluster.x-k8s.io.
	Name  string `json:"name"`
	Found bool   `json:"found"`
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Established is true once the server serves the CRD's resources.
	Established bool `json:"established"`
	// Reason explains why a found CRD is not established.
	Reason string `json:"reason,omitempty"`
	// Served lists the versions the server serves, in CRD order.
	Served []string `json:"served,omitempty"`
	// Storage is the version objects are stored in.
	Storage string `json:"storage,omitempty"`
}

// Serves reports whether the CRD serves version v.
func (d CRD) Serves(v string) bool { return slices.Contains(d.Served, v) }

// CRD looks up one CustomResourceDefinition by name. A CRD that does not
// exist is not an error: it comes back with Found false.
func (c *Client) CRD(ctx context.Context, name string) (CRD, error) {
	cl, err := c.Ctrl()
	if err != nil {
		return CRD{Name: name}, err
	}
	var obj apiextensionsv1.CustomResourceDefinition
	if err := cl.Get(ctx, types.NamespacedName{Name: name}, &obj); err != nil {
		if apierrors.IsNotFound(err) {
			return CRD{Name: name}, nil
		}
		return CRD{Name: name}, fmt.Errorf("reading CRD %s from %s: %w", name, c.config.Host, err)
	}
	return crdOf(&obj), nil
}

// CRDs looks up each named CustomResourceDefinition, in order.
func (c *Client) CRDs(ctx context.Context, names ...string) ([]CRD, error) {
	out := make([]CRD, 0, len(names))
	for _, n := range names {
		d, err := c.CRD(ctx, n)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func crdOf(obj *apiextensionsv1.CustomResourceDefinition) CRD {
	d := CRD{
		Name:  obj.Name,
		Found: true,
		Group: obj.Spec.Group,
		Kind:  obj.Spec.Names.Kind,
	}
	for _, v := range obj.Spec.Versions {
		if v.Served {
			d.Served = append(d.Served, v.Name)
		}
		if v.Storage {
			d.Storage = v.Name
		}
	}
	var established, names *apiextensionsv1.CustomResourceDefinitionCondition
	for i := range obj.Status.Conditions {
		switch cond := &obj.Status.Conditions[i]; cond.Type {
		case apiextensionsv1.Established:
			established = cond
		case apiextensionsv1.NamesAccepted:
			names = cond
		}
	}
	d.Established = established != nil && established.Status == apiextensionsv1.ConditionTrue
	switch {
	case d.Established:
	case names != nil && names.Status == apiextensionsv1.ConditionFalse:
		// A name conflict is the usual reason a CRD never establishes.
		d.Reason = condText(*names)
	case established != nil:
		d.Reason = condText(*established)
	default:
		d.Reason = "the API server has not accepted it yet (no Established condition)"
	}
	return d
}

func condText(cond apiextensionsv1.CustomResourceDefinitionCondition) string {
	s := fmt.Sprintf("%s=%s", cond.Type, cond.Status)
	if cond.Reason != "" {
		s += " (" + cond.Reason + ")"
	}
	if cond.Message != "" {
		s += ": " + cond.Message
	}
	return s
}
