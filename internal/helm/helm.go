// Package helm is labctl's adapter to the Helm SDK: it fetches a pinned
// chart (from a repository or a local .tgz), installs or upgrades it as a
// release, reads releases back and renders charts for dry runs. It writes
// nothing to disk and reads no Helm configuration from the user's home.
package helm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/repo"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/redact"
)

// Chart is one pinned chart and where it comes from.
type Chart struct {
	Name    string // in the repository, e.g. cert-manager
	Version string // exact; never a range
	// Repo is the repository URL (the folder holding index.yaml).
	Repo string
	// File is a local chart archive; when set, Repo is not used.
	File string
	// Archive is a chart archive labctl carries in its binary; when set,
	// File and Repo are not used.
	Archive []byte
}

func (c Chart) String() string { return c.Name + " " + c.Version }

// Release is a chart installed under a name into a namespace.
type Release struct {
	Name      string
	Namespace string
	Chart     Chart
	Values    map[string]any
}

// Client installs and reads releases on one cluster.
type Client struct {
	cfg  *rest.Config
	http *http.Client
	// Log receives Helm's debug lines; nil drops them.
	Log func(format string, args ...any)
}

// New returns a client for the cluster cfg points at. Every request goes
// through cfg's transport, wrappers included.
func New(cfg *rest.Config) *Client {
	return &Client{cfg: rest.CopyConfig(cfg), http: &http.Client{Timeout: 2 * time.Minute}}
}

// Load fetches the chart archive (checking the repository's digest) or
// reads the local file, and loads it.
func (c *Client) Load(ctx context.Context, ch Chart) (*chart.Chart, error) {
	data, err := c.archive(ctx, ch)
	if err != nil {
		return nil, err
	}
	loaded, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", ch, err)
	}
	if loaded.Metadata.Name != ch.Name || loaded.Metadata.Version != ch.Version {
		return nil, fmt.Errorf("loading chart %s: the archive holds %s %s", ch, loaded.Metadata.Name, loaded.Metadata.Version)
	}
	return loaded, nil
}

func (c *Client) archive(ctx context.Context, ch Chart) ([]byte, error) {
	if ch.Archive != nil {
		return ch.Archive, nil
	}
	if ch.File != "" {
		data, err := os.ReadFile(ch.File)
		if err != nil {
			return nil, fmt.Errorf("reading chart %s: %w", ch, err)
		}
		return data, nil
	}
	if ch.Repo == "" {
		return nil, fmt.Errorf("fetching chart %s: no repository or file given", ch)
	}
	base := strings.TrimSuffix(ch.Repo, "/") + "/"
	raw, err := c.get(ctx, base+"index.yaml")
	if err != nil {
		return nil, fmt.Errorf("fetching chart %s: reading the repository index: %w", ch, err)
	}
	var idx repo.IndexFile
	if err := yaml.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("fetching chart %s: %sindex.yaml is not a chart repository index: %w", ch, base, err)
	}
	var cv *repo.ChartVersion
	var have []string
	for _, v := range idx.Entries[ch.Name] {
		if v == nil {
			continue
		}
		have = append(have, v.Version)
		if v.Version == ch.Version {
			cv = v
		}
	}
	switch {
	case len(have) == 0:
		return nil, fmt.Errorf("fetching chart %s: %s has no chart %q", ch, redact.URL(ch.Repo), ch.Name)
	case cv == nil:
		return nil, fmt.Errorf("fetching chart %s: %s has no version %s of %s (it has %d others, e.g. %s)", ch, redact.URL(ch.Repo), ch.Version, ch.Name, len(have), have[0])
	case len(cv.URLs) == 0:
		return nil, fmt.Errorf("fetching chart %s: the index lists no download URL", ch)
	}
	u, err := resolve(base, cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("fetching chart %s: %w", ch, err)
	}
	data, err := c.get(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("fetching chart %s: %w", ch, err)
	}
	if cv.Digest != "" {
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != cv.Digest {
			return nil, fmt.Errorf("fetching chart %s: %s has sha256 %s, but the index says %s", ch, u, got, cv.Digest)
		}
	}
	return data, nil
}

// UnreachableError is a chart repository that did not answer at all
// (offline, say), as opposed to one that answered wrong. A dry run goes
// on without the chart and says so.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return e.Err.Error() }

func (e *UnreachableError) Unwrap() error { return e.Err }

func resolve(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("the index lists a bad URL %q: %w", ref, err)
	}
	return b.ResolveReference(r).String(), nil
}

func (c *Client) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "labctl")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &UnreachableError{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// State is what the cluster holds of one release.
type State struct {
	Found        bool
	Status       release.Status
	ChartVersion string
	Revision     int
	Values       map[string]any
	// Deployed is true when some revision was ever deployed, so an
	// upgrade (rather than a fresh install) is possible.
	Deployed bool
}

func (c *Client) action(namespace string) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	log := c.Log
	if log == nil {
		log = func(string, ...any) {}
	}
	if err := cfg.Init(&getter{cfg: c.cfg, namespace: namespace}, namespace, "secret", log); err != nil {
		return nil, fmt.Errorf("setting up Helm for namespace %s: %w", namespace, err)
	}
	return cfg, nil
}

// State reads the release name in namespace.
func (c *Client) State(_ context.Context, name, namespace string) (State, error) {
	cfg, err := c.action(namespace)
	if err != nil {
		return State{}, err
	}
	last, err := cfg.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("reading Helm release %s/%s: %w", namespace, name, err)
	}
	st := State{Found: true, Status: last.Info.Status, Revision: last.Version, Values: last.Config}
	if last.Chart != nil && last.Chart.Metadata != nil {
		st.ChartVersion = last.Chart.Metadata.Version
	}
	if d, err := cfg.Releases.Deployed(name); err == nil && d != nil {
		st.Deployed = true
	}
	return st, nil
}

// Plan says what Ensure would do: "" when the release is deployed at the
// chart version with the same values.
func (c *Client) Plan(ctx context.Context, r Release) (string, error) {
	st, err := c.State(ctx, r.Name, r.Namespace)
	if err != nil {
		return "", err
	}
	return plan(st, r), nil
}

func plan(st State, r Release) string {
	what := fmt.Sprintf("Helm release %s/%s", r.Namespace, r.Name)
	switch {
	case !st.Found:
		return fmt.Sprintf("install %s (chart %s)", what, r.Chart)
	case st.Status.IsPending():
		return fmt.Sprintf("finish %s, left %s by an interrupted run (chart %s)", what, st.Status, r.Chart)
	case st.Status != release.StatusDeployed:
		return fmt.Sprintf("install %s again, it is %s (chart %s)", what, st.Status, r.Chart)
	case st.ChartVersion != r.Chart.Version:
		return fmt.Sprintf("upgrade %s from chart version %s to %s", what, st.ChartVersion, r.Chart.Version)
	case !sameValues(st.Values, r.Values):
		return fmt.Sprintf("upgrade %s: its values changed (chart %s)", what, r.Chart)
	}
	return ""
}

// sameValues compares values as Helm stores them (through JSON).
func sameValues(a, b map[string]any) bool {
	norm := func(m map[string]any) any {
		if len(m) == 0 {
			return nil
		}
		var out any
		data, _ := json.Marshal(m)
		_ = json.Unmarshal(data, &out)
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// Ensure installs or upgrades r unless it is already deployed as asked; it
// returns what it did ("" for nothing). It does not wait for the chart's
// workloads (labctl watches them itself), but Helm does run and wait for
// the chart's hooks, up to timeout.
func (c *Client) Ensure(ctx context.Context, r Release, timeout time.Duration) (string, error) {
	cfg, err := c.action(r.Namespace)
	if err != nil {
		return "", err
	}
	st, err := c.State(ctx, r.Name, r.Namespace)
	if err != nil {
		return "", err
	}
	todo := plan(st, r)
	if todo == "" {
		return "", nil
	}
	ch, err := c.Load(ctx, r.Chart)
	if err != nil {
		return "", err
	}
	if st.Found && st.Status.IsPending() {
		// Helm refuses to touch a release another operation holds. Nothing
		// else runs labctl's releases, so a pending one is an interrupted
		// run of labctl: mark it failed and carry on.
		last, err := cfg.Releases.Last(r.Name)
		if err != nil {
			return "", fmt.Errorf("reading Helm release %s/%s: %w", r.Namespace, r.Name, err)
		}
		last.SetStatus(release.StatusFailed, "interrupted; labctl takes it over")
		if err := cfg.Releases.Update(last); err != nil {
			return "", fmt.Errorf("recovering Helm release %s/%s: %w", r.Namespace, r.Name, err)
		}
	}
	values := copyValues(r.Values)
	if st.Deployed {
		up := action.NewUpgrade(cfg)
		up.Namespace = r.Namespace
		up.Timeout = timeout
		up.MaxHistory = 5
		if _, err := up.RunWithContext(ctx, r.Name, ch, values); err != nil {
			return todo, fmt.Errorf("upgrading Helm release %s/%s to chart %s: %w", r.Namespace, r.Name, r.Chart, err)
		}
		return todo, nil
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = r.Name
	in.Namespace = r.Namespace
	in.CreateNamespace = true
	in.Timeout = timeout
	in.Replace = st.Found // reuse the name of a failed first install
	if _, err := in.RunWithContext(ctx, ch, values); err != nil {
		return todo, fmt.Errorf("installing Helm release %s/%s (chart %s): %w", r.Namespace, r.Name, r.Chart, err)
	}
	return todo, nil
}

// Render returns the manifests Ensure would apply, CRDs and hooks
// included, as 'helm template' does, for the given Kubernetes version.
func (c *Client) Render(ctx context.Context, r Release, kubeVersion string) ([]byte, error) {
	ch, err := c.Load(ctx, r.Chart)
	if err != nil {
		return nil, err
	}
	cfg := new(action.Configuration)
	in := action.NewInstall(cfg)
	in.DryRun = true
	in.ClientOnly = true
	in.IncludeCRDs = true
	in.Replace = true
	in.ReleaseName = r.Name
	in.Namespace = r.Namespace
	if kubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(kubeVersion)
		if err != nil {
			return nil, fmt.Errorf("rendering chart %s: %w", r.Chart, err)
		}
		in.KubeVersion = kv
	}
	rel, err := in.RunWithContext(ctx, ch, copyValues(r.Values))
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s: %w", r.Chart, err)
	}
	var b bytes.Buffer
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		b.WriteString("\n---\n# Source: " + h.Path + " (hook)\n" + h.Manifest + "\n")
	}
	return b.Bytes(), nil
}

// copyValues deep-copies values so Helm's coalescing never edits ours.
func copyValues(v map[string]any) map[string]any {
	out := map[string]any{}
	data, _ := json.Marshal(v)
	_ = json.Unmarshal(data, &out)
	return out
}

// RESTClientGetter hands Helm a REST config instead of a kubeconfig file,
// so Helm's requests share labctl's transport (and its wrappers).
func RESTClientGetter(cfg *rest.Config, namespace string) genericclioptions.RESTClientGetter {
	return &getter{cfg: rest.CopyConfig(cfg), namespace: namespace}
}

type getter struct {
	cfg       *rest.Config
	namespace string
}

func (g *getter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *getter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(g.cfg)
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g *getter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	m := restmapper.NewDeferredDiscoveryRESTMapper(dc)
	return restmapper.NewShortcutExpander(m, dc, nil), nil
}

func (g *getter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveClientConfig(*clientcmdapi.NewConfig(), "",
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}}, nil)
}
