// Package testbed starts a real Kubernetes API (kube-apiserver and etcd,
// built by hack/testenv.sh) for tests, through controller-runtime's envtest,
// and installs the upstream CRDs a test asks for.
//
//	env := testbed.Start(t, testbed.WithCRDs("capi"))
//	// env.Kubeconfig is a kubeconfig file; env.Config a *rest.Config.
//
// Where the binaries are missing the test is skipped with a message saying
// how to build them, unless CI or LABCTL_REQUIRE_TESTBED is set: then it
// fails, because a CI run that skips its real tests proves nothing.
package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

// Environment variables the test bed reads.
const (
	// EnvAssets names the folder holding kube-apiserver, etcd and kubectl.
	EnvAssets = "KUBEBUILDER_ASSETS"
	// EnvRequire turns a missing test bed from a skip into a failure; so
	// does CI.
	EnvRequire = "LABCTL_REQUIRE_TESTBED"
)

// CRD sets by name. Each is rendered from upstream providers' own
// manifests in the module cache (package upstream), at the versions the
// test bed's wrapper modules select, so the CRDs carry the contract labels
// and conversion webhooks of the releases and a fresh clone needs nothing
// beside it: "kamaji" is the Kamaji control-plane provider's release file.
var crdSets = map[string][]string{
	"capi":            {"cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane"},
	"capmox":          {"capmox"},
	"operator":        {"cluster-api-operator"},
	"ipam":            {"ipam-in-cluster"},
	"helm-controller": {"helm-controller"},
	"kamaji":          {"kamaji-provider"},
}

// CRDSets lists the names WithCRDs accepts.
func CRDSets() []string {
	names := make([]string, 0, len(crdSets))
	for n := range crdSets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Env is a running API server with its kubeconfig.
type Env struct {
	// Kubeconfig is a kubeconfig file (mode 0600) for an admin user.
	Kubeconfig string
	// Config is the same admin user as a REST config.
	Config *rest.Config
	// CRDs are the CRDs installed at start.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// StartTime is how long starting (servers and CRDs) took.
	StartTime time.Duration
	// AuditLog is the API server's audit log (JSON lines), when WithAuditLog
	// asked for one.
	AuditLog string

	env      *envtest.Environment
	stopOnce sync.Once
	stopErr  error
}

// Option changes how Start sets up the test bed.
type Option func(*options)

type options struct {
	sets  []string
	paths []string
	crds  []*apiextensionsv1.CustomResourceDefinition
	audit bool
	// endpointRouting: see WithEndpointRouting.
	endpointRouting bool
}

// WithEndpointRouting makes the API server reach webhook and aggregated
// Services through their EndpointSlices rather than their ClusterIP
// (kube-apiserver --enable-aggregator-routing), so a Service whose
// endpoint is a process on loopback (package runner) answers, as a
// Service backed by a pod does in a real cluster.
func WithEndpointRouting() Option {
	return func(o *options) { o.endpointRouting = true }
}

// WithCRDs installs CRD sets by name: "capi" (core, kubeadm bootstrap and
// control plane), "capmox", "operator", "ipam", "helm-controller" and
// "kamaji" (the Kamaji control-plane provider), rendered from the upstream
// modules.
func WithCRDs(sets ...string) Option {
	return func(o *options) { o.sets = append(o.sets, sets...) }
}

// WithCRDPaths installs CRDs from these files or folders as well.
func WithCRDPaths(paths ...string) Option {
	return func(o *options) { o.paths = append(o.paths, paths...) }
}

// WithCRDObjects installs these CRDs as well: rendered ones a caller has
// changed, for example to point their conversion webhooks at a local
// process.
func WithCRDObjects(crds ...*apiextensionsv1.CustomResourceDefinition) Option {
	return func(o *options) { o.crds = append(o.crds, crds...) }
}

// WithAuditLog makes the API server log every request's metadata (not its
// body) to Env.AuditLog, so a test can count what a child process wrote.
func WithAuditLog() Option {
	return func(o *options) { o.audit = true }
}

// Start runs kube-apiserver and etcd for the test and stops them when the
// test ends. It skips (or fails under CI) when the binaries are missing.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	assets := Assets(t)
	crds := append(crdsOf(t, o.sets), o.crds...)
	paths := o.paths

	var audit auditFiles
	if o.audit {
		dir := t.TempDir()
		audit = auditFiles{log: filepath.Join(dir, "audit.log"), policy: filepath.Join(dir, "audit-policy.yaml")}
		const rules = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n"
		if err := os.WriteFile(audit.policy, []byte(rules), 0o600); err != nil {
			t.Fatalf("testbed: %v", err)
		}
	}
	env, err := start(assets, crds, paths, audit, o.endpointRouting)
	if env != nil {
		// Registered before checking err: the servers stop also when the
		// start failed half way.
		t.Cleanup(func() {
			if err := env.Stop(); err != nil {
				t.Errorf("testbed: stopping the API server: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	env.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(env.Kubeconfig, env.env.KubeConfig, 0o600); err != nil {
		t.Fatalf("testbed: writing kubeconfig: %v", err)
	}
	t.Logf("testbed: kube-apiserver and etcd ready at %s in %s (%d CRDs)",
		env.Config.Host, env.StartTime.Round(time.Millisecond), len(env.CRDs))
	return env
}

// start starts the servers. On error after the servers were launched it
// stops them before returning, and still returns the Env so the caller
// can Stop again safely.
// auditFiles are the audit log and its policy; empty means no audit log.
type auditFiles struct{ log, policy string }

func start(assets string, crds []*apiextensionsv1.CustomResourceDefinition, crdPaths []string, audit auditFiles, endpointRouting bool) (*Env, error) {
	quietControllerRuntime()
	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  crds,
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: true,
		// envtest's defaults (20 s per server, 10 s for CRDs) are too short
		// on a loaded 2-core machine running several test packages at once.
		CRDInstallOptions: envtest.CRDInstallOptions{MaxTime: 2 * time.Minute},
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		te.ControlPlaneStartTimeout = 2 * time.Minute
	}
	// Name the binaries outright so a stray KUBEBUILDER_ASSETS elsewhere
	// cannot swap them.
	te.ControlPlane.GetAPIServer().Path = filepath.Join(assets, "kube-apiserver")
	te.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd")}
	te.ControlPlane.KubectlPath = filepath.Join(assets, "kubectl")
	if audit.log != "" {
		te.ControlPlane.GetAPIServer().Configure().
			Set("audit-log-path", audit.log).
			Set("audit-policy-file", audit.policy).
			Set("audit-log-mode", "blocking")
	}
	if endpointRouting {
		te.ControlPlane.GetAPIServer().Configure().Set("enable-aggregator-routing", "true")
	}

	env := &Env{env: te, AuditLog: audit.log}
	began := time.Now()
	cfg, err := te.Start()
	env.StartTime = time.Since(began)
	if err != nil {
		if stopErr := env.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (and stopping what had started: %v)", err, stopErr)
		}
		return env, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	env.Config = cfg
	env.CRDs = te.CRDs
	return env, nil
}

// Stop stops the servers. It is safe to call more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() { e.stopErr = e.env.Stop() })
	return e.stopErr
}

// Required reports whether a missing test bed must fail the test rather
// than skip it: under CI or LABCTL_REQUIRE_TESTBED.
func Required() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequire) != ""
}

// Assets returns the folder with kube-apiserver, etcd and kubectl:
// KUBEBUILDER_ASSETS, else .testbed/bin under the module root where
// hack/testenv.sh puts them. Where they are missing the test is skipped,
// or fails when Required.
func Assets(t testing.TB) string {
	t.Helper()
	dir, err := findAssets()
	if err != nil {
		msg := fmt.Sprintf("testbed: %v; build the test bed with 'make test' (or run hack/testenv.sh and set %s to the folder it prints)", err, EnvAssets)
		if Required() {
			t.Fatalf("%s [not skipped: CI or %s is set]", msg, EnvRequire)
		}
		t.Skip(msg)
	}
	return dir
}

func findAssets() (string, error) {
	dir := os.Getenv(EnvAssets)
	from := "named by " + EnvAssets
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", fmt.Errorf("%s is not set and %v", EnvAssets, err)
		}
		dir = filepath.Join(root, ".testbed", "bin")
		from = "the default folder, as " + EnvAssets + " is not set"
	}
	var missing []string
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl"} {
		fi, err := os.Stat(filepath.Join(dir, bin))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%s missing in %s (%s)", strings.Join(missing, ", "), dir, from)
	}
	return dir, nil
}

// ModuleRoot walks up from the working directory to the folder holding
// go.mod.
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("finding the module root: no go.mod above %s", wd)
		}
		dir = parent
	}
}

// crdsOf renders the named CRD sets.
func crdsOf(t testing.TB, sets []string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crds []*apiextensionsv1.CustomResourceDefinition
	seen := map[string]bool{}
	for _, name := range sets {
		if seen[name] {
			continue
		}
		seen[name] = true
		providers, ok := crdSets[name]
		if !ok {
			t.Fatalf("testbed: unknown CRD set %q (known: %s)", name, strings.Join(CRDSets(), ", "))
		}
		for _, p := range providers {
			got, err := UpstreamCRDs(p)
			if err != nil {
				t.Fatalf("testbed: CRD set %q: %v", name, err)
			}
			crds = append(crds, got...)
		}
	}
	return crds
}

// UpstreamCRDs renders one upstream provider's CRDs (package upstream
// names them) from its module, as fresh copies the caller may change.
func UpstreamCRDs(provider string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := upstream.Get(ctx, root, provider)
	if err != nil {
		return nil, err
	}
	return c.CRDs()
}

var quietOnce sync.Once

// quietControllerRuntime gives controller-runtime a logger that prints
// errors only, so it does not complain that none was set.
func quietControllerRuntime() {
	quietOnce.Do(func() {
		ctrllog.SetLogger(funcr.New(func(prefix, args string) {
			fmt.Fprintln(os.Stderr, "testbed: envtest:", prefix, args)
		}, funcr.Options{Verbosity: 0}))
	})
}

// AuditEvent is the part of an audit log line tests count.
type AuditEvent struct {
	Verb           string `json:"verb"`
	RequestURI     string `json:"requestURI"`
	UserAgent      string `json:"userAgent"`
	Stage          string `json:"stage"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Audit reads the audit log's completed requests. It needs WithAuditLog.
func (e *Env) Audit(t testing.TB) []AuditEvent {
	t.Helper()
	if e.AuditLog == "" {
		t.Fatal("testbed: Audit needs WithAuditLog")
	}
	data, err := os.ReadFile(e.AuditLog)
	if err != nil {
		t.Fatalf("testbed: reading the audit log: %v", err)
	}
	var out []AuditEvent
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		var ev AuditEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("testbed: audit log line %q: %v", line, err)
		}
		if ev.Stage == "ResponseComplete" {
			out = append(out, ev)
		}
	}
	return out
}

// IsWrite reports whether an audited request changed state.
func (ev AuditEvent) IsWrite() bool {
	switch ev.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// PreviousKubernetes is the release before labctl's pin whose control
// plane the test bed also builds (hack/testenv.sh kv_prev), for the
// upgrade tests: a workload cluster made at it and upgraded to the pin.
const PreviousKubernetes = "v1.35.3"

// KubernetesBinaryName is the file of the test bed's name
// (kube-apiserver, kube-controller-manager, kube-scheduler) at Kubernetes
// version v: the plain name at labctl's pin, NAME-v for the previous
// release. Any other version is an error naming the two, so a test never
// runs one version under another's name.
func KubernetesBinaryName(v, name string) (string, error) {
	switch pin := versions.MustGet().Kubernetes; v {
	case pin:
		return name, nil
	case PreviousKubernetes:
		return name + "-" + v, nil
	default:
		return "", fmt.Errorf("the test bed builds %s only at %s (the pin) and %s, not %s", name, pin, PreviousKubernetes, v)
	}
}

// KubernetesBinary is the path of KubernetesBinaryName in the assets
// folder, which must hold it.
func KubernetesBinary(assets, v, name string) (string, error) {
	file, err := KubernetesBinaryName(v, name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(assets, file)
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		return "", fmt.Errorf("the test bed has no %s at %s (%s); build it with 'hack/testenv.sh %s'", name, v, path, file)
	}
	return path, nil
}
