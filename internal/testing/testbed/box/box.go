// Package box starts a management cluster in a box for tests: etcd,
// kube-apiserver and kube-controller-manager, and the real upstream
// provider managers (built by `hack/testenv.sh controllers`) with their
// webhooks served and registered, as cert-manager's CA injection would
// register them in a real cluster: a serving certificate made here, and the
// providers' own webhook configurations and CRD conversion webhooks,
// rendered from their config/ folders, pointed at the local process.
//
// The webhooks are not optional: without Cluster API's defaulting webhook
// the MachineDeployment controller dereferences the unset spec.replicas of
// an autoscaled MachineDeployment and panics (measured here, v1.12.10).
//
//	b := box.Start(t, box.WithProviders("cluster-api"), box.WithCRDsOf("capmox"))
//	// b.Env is the testbed.Env: b.Env.Kubeconfig, b.Env.Config.
package box

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/certmanager"
	"github.com/labctl/labctl/internal/testing/testbed/kamajietcd"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
)

// EnvRequire turns missing controller binaries from a skip into a failure.
const EnvRequire = "LABCTL_REQUIRE_CONTROLLERS"

// Box is a running management cluster.
type Box struct {
	Env *testbed.Env
	// Procs are the processes started, by binary name.
	Procs map[string]*Proc
	// Runner plays the kubelet for Deployments of the upstream images
	// labctl pins (package runner).
	Runner *runner.Runner
	// ports release the fixed webhook ports the managers hold.
	ports []func()
}

// Proc is one controller process of the box.
type Proc struct {
	Name string
	// Log is the file its stdout and stderr go to; kept when the test fails.
	Log  string
	cmd  *exec.Cmd
	done chan error
}

// Option changes what Start runs.
type Option func(*options)

type options struct {
	providers []string
	crdsOf    []string
	env       map[string][]string
	args      map[string][]string
	specs     map[string]map[string]any
	bare      bool
	audit     bool
}

// Bare starts no provider manager beside the API server: the runner runs
// what Deployments the test (or the operator) applies.
func Bare() Option {
	return func(o *options) { o.bare = true }
}

// WithAuditLog gives the API server an audit log (testbed.WithAuditLog).
func WithAuditLog() Option {
	return func(o *options) { o.audit = true }
}

// WithProviders runs these upstream providers' managers (names as in
// upstream.Providers; only the Cluster API managers are wired so far).
func WithProviders(names ...string) Option {
	return func(o *options) { o.providers = append(o.providers, names...) }
}

// WithCRDsOf installs these upstream providers' rendered CRDs without
// running their managers (their webhooks are then not registered, as in a
// cluster where the provider is not installed yet).
func WithCRDsOf(providers ...string) Option {
	return func(o *options) { o.crdsOf = append(o.crdsOf, providers...) }
}

// WithEnv adds environment variables (NAME=value) to a provider manager's
// process, as a Deployment's env would: for CAPMOX, PROXMOX_URL and the
// rest of its credentials.
func WithEnv(provider string, env ...string) Option {
	return func(o *options) {
		if o.env == nil {
			o.env = map[string][]string{}
		}
		o.env[provider] = append(o.env[provider], env...)
	}
}

// WithArgs adds flags to a provider manager's command line, after the
// box's own, as a Deployment's container args would: for CAPMOX, the TLS
// flags labctl's Provider CR gives it.
func WithArgs(provider string, args ...string) Option {
	return func(o *options) {
		if o.args == nil {
			o.args = map[string][]string{}
		}
		o.args[provider] = append(o.args[provider], args...)
	}
}

// WithOperatorSpec applies the patches of the Provider CR spec labctl
// renders for provider to its release's webhook configurations, as the
// operator applies them to the release it installs: for CAPMOX, the
// webhook's skip of Cluster API's topology dry runs
// (components.CAPMOXValidatingWebhooks).
func WithOperatorSpec(provider string, spec map[string]any) Option {
	return func(o *options) {
		if o.specs == nil {
			o.specs = map[string]map[string]any{}
		}
		o.specs[provider] = spec
	}
}

// managerArgs are each provider manager's command line, given its webhook
// port, certificate folder and health port. Only what a real Deployment
// would set differently here: the kubeconfig replaces the in-cluster
// config, leader election is off (one replica), and every listener but
// the webhook server (which takes no host in v1.12) is on loopback.
var managerArgs = map[string]func(webhookPort, healthPort, diagPort int, certDir, kubeconfig string) []string{
	"cluster-api":           capiArgs,
	"kubeadm-bootstrap":     capiArgs,
	"kubeadm-control-plane": capiArgs,
	"capmox":                capmoxArgs,
	"ipam-in-cluster":       ipamArgs,
}

// capiArgs are the flags of Cluster API's managers (main.go in
// sigs.k8s.io/cluster-api v1.12.10 and its bootstrap/kubeadm and
// controlplane/kubeadm; diagnostics from util/flags).
func capiArgs(webhookPort, healthPort, diagPort int, certDir, kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + certDir,
		"--health-addr=127.0.0.1:" + strconv.Itoa(healthPort),
		"--diagnostics-address=127.0.0.1:" + strconv.Itoa(diagPort),
		"--insecure-diagnostics",
	}
}

// Start runs the box and stops it when the test ends. It skips (or fails
// under CI) when a binary is missing, as testbed.Start does.
func Start(t testing.TB, opts ...Option) *Box {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.providers) == 0 && !o.bare {
		o.providers = []string{"cluster-api"}
	}
	assets := testbed.Assets(t)
	bins := map[string]string{"kube-controller-manager": filepath.Join(assets, "kube-controller-manager")}
	for _, p := range o.providers {
		if managerArgs[p] == nil {
			t.Fatalf("box: provider %q is not wired into the box yet (wired: %s)", p, strings.Join(wired(), ", "))
		}
		bins[p] = filepath.Join(assets, p)
	}
	requireBinaries(t, bins)

	dir := t.TempDir()
	ca, err := newServingCert(dir)
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatalf("box: %v", err)
	}

	type served struct {
		name                   string
		webhookPort, health    int
		diag                   int
		validating             []*admissionregistrationv1.ValidatingWebhookConfiguration
		mutating               []*admissionregistrationv1.MutatingWebhookConfiguration
		crds                   []*apiextensionsv1.CustomResourceDefinition
		webhookURL, healthzURL string
	}
	var all []*served
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, name := range o.providers {
		ports, err := freePorts(t, 3)
		if err != nil {
			t.Fatalf("box: %v", err)
		}
		s := &served{name: name, webhookPort: ports[0], health: ports[1], diag: ports[2]}
		if p := fixedWebhookPort[name]; p != 0 {
			s.webhookPort = p
		}
		s.webhookURL = "https://127.0.0.1:" + strconv.Itoa(s.webhookPort)
		c, err := upstream.Get(t.Context(), root, name)
		if err != nil {
			t.Fatalf("box: %v", err)
		}
		if s.validating, s.mutating, err = c.WebhooksAsOperator(o.specs[name]); err != nil {
			t.Fatalf("box: %v", err)
		}
		for _, v := range s.validating {
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig = pointAt(v.Webhooks[i].ClientConfig, s.webhookURL, ca)
			}
		}
		for _, m := range s.mutating {
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig = pointAt(m.Webhooks[i].ClientConfig, s.webhookURL, ca)
			}
		}
		if s.crds, err = c.CRDs(); err != nil {
			t.Fatalf("box: %v", err)
		}
		for _, crd := range s.crds {
			if cv := crd.Spec.Conversion; cv != nil && cv.Webhook != nil && cv.Webhook.ClientConfig != nil {
				cc := cv.Webhook.ClientConfig
				path := "/convert"
				if cc.Service != nil && cc.Service.Path != nil {
					path = *cc.Service.Path
				}
				url := s.webhookURL + path
				cv.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: ca}
			}
		}
		crds = append(crds, s.crds...)
		all = append(all, s)
	}
	for _, name := range o.crdsOf {
		got, err := testbed.UpstreamCRDs(name)
		if err != nil {
			t.Fatalf("box: %v", err)
		}
		crds = append(crds, got...)
	}
	// Webhook Services are reached through their EndpointSlices, which
	// the runner writes for the processes it runs.
	// As cluster-api-operator installs them: clusterctl's move (mgmt
	// backup) finds the kinds by the label.
	for _, crd := range crds {
		testbed.LabelAsTheOperator(crd)
	}
	topts := []testbed.Option{testbed.WithCRDObjects(crds...), testbed.WithEndpointRouting()}
	if o.audit {
		topts = append(topts, testbed.WithAuditLog())
	}
	env := testbed.Start(t, topts...)
	b := &Box{Env: env, Procs: map[string]*Proc{}}

	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	ctx := t.Context()
	for _, s := range all {
		for _, v := range s.validating {
			if err := cl.Create(ctx, v); err != nil {
				t.Fatalf("box: registering %s's webhooks %s: %v", s.name, v.Name, err)
			}
		}
		for _, m := range s.mutating {
			if err := cl.Create(ctx, m); err != nil {
				t.Fatalf("box: registering %s's webhooks %s: %v", s.name, m.Name, err)
			}
		}
	}

	b.run(t, "kube-controller-manager", bins["kube-controller-manager"], dir,
		"--kubeconfig="+env.Kubeconfig,
		"--leader-elect=false",
		// No HTTPS of its own: nothing here scrapes it. (Without
		// --service-account-private-key-file it skips the token
		// controller, whose key envtest keeps to itself.)
		"--secure-port=0",
		// The runner reports Deployments' status from the processes it
		// runs; the deployment and ReplicaSet controllers would overwrite
		// it from Pods no kubelet runs.
		"--controllers=*,-deployment-controller,-replicaset-controller")
	b.Runner = runner.Start(t, env.Config, env.Kubeconfig, assets)
	// cert-manager's binaries cannot be built here; when its chart is
	// installed, the stand-in runs its Deployments (package certmanager).
	certmanager.Serve(t, env.Config, b.Runner)
	// Nor is etcdctl built: the kamaji-etcd chart's setup Job is played
	// (package kamajietcd); its StatefulSet's etcd is the runner's.
	kamajietcd.Serve(t, env.Config, b.Runner)
	for _, s := range all {
		extra, err := managerEnv(s.name, dir)
		if err != nil {
			t.Fatalf("box: %v", err)
		}
		if fixedWebhookPort[s.name] != 0 {
			b.ports = append(b.ports, holdPort(t, s.name, s.webhookPort))
		}
		b.runEnv(t, s.name, bins[s.name], dir, append(extra, o.env[s.name]...), append(managerArgs[s.name](s.webhookPort, s.health, s.diag, dir, env.Kubeconfig), o.args[s.name]...)...)
	}
	for _, s := range all {
		waitReady(t, b.Procs[s.name], s.webhookURL, "http://127.0.0.1:"+strconv.Itoa(s.health)+"/readyz", ca)
	}
	return b
}

// Require skips the test (or fails it under LABCTL_REQUIRE_CONTROLLERS)
// when one of these controller binaries is missing: for tests whose
// Deployments the runner runs.
func Require(t testing.TB, names ...string) {
	t.Helper()
	assets := testbed.Assets(t)
	bins := map[string]string{}
	for _, n := range names {
		bins[n] = filepath.Join(assets, n)
	}
	requireBinaries(t, bins)
}

func requireBinaries(t testing.TB, bins map[string]string) {
	t.Helper()
	var missing []string
	for name, p := range bins {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("box: %s missing beside kube-apiserver; build them with 'hack/testenv.sh controllers'", strings.Join(missing, ", "))
	if testbed.Required() || os.Getenv(EnvRequire) != "" {
		t.Fatalf("%s [not skipped: CI, %s or %s is set]", msg, testbed.EnvRequire, EnvRequire)
	}
	t.Skip(msg)
}

// pointAt turns a webhook's Service reference into a URL at the local
// process, keeping the Service's path, with the box's CA.
func pointAt(cc admissionregistrationv1.WebhookClientConfig, base string, ca []byte) admissionregistrationv1.WebhookClientConfig {
	path := ""
	if cc.Service != nil && cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	url := base + path
	return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca}
}

// run starts a process with its log in dir and stops it when the test
// ends: SIGTERM, then SIGKILL after 10 s. A failed test gets the log's tail.
func (b *Box) run(t testing.TB, name, bin, dir string, args ...string) {
	t.Helper()
	b.runEnv(t, name, bin, dir, nil, args...)
}

// runEnv is run with extra environment variables (NAME=value).
func (b *Box) runEnv(t testing.TB, name, bin, dir string, env []string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+b.Env.Kubeconfig), env...)
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("box: starting %s: %v", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	b.Procs[name] = p
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("box: %s's log (%s), last lines:\n%s", name, logPath, runner.Tail(logPath, 60))
		}
	})
}

// StopControllers stops every provider manager and kube-controller-manager
// the box runs, and the runner's processes (the autoscalers), as when the
// management VM is lost; the API server and etcd keep answering, holding
// what the controllers left. The test's cleanup finds them stopped.
func (b *Box) StopControllers() {
	for _, p := range b.Procs {
		p.stop()
	}
	if b.Runner != nil {
		b.Runner.Stop()
	}
	// Another box's manager may now bind them.
	for _, release := range b.ports {
		release()
	}
}

// stop ends the process as the test's cleanup does: SIGTERM, then SIGKILL
// after 10 s. The cleanup then finds it ended.
func (p *Proc) stop() {
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-p.done
	}
	p.done <- err
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// waitReady waits until the manager's webhook server answers TLS with the
// box's certificate and its readiness probe says ok.
func waitReady(t testing.TB, p *Proc, webhookURL, readyz string, ca []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		if exited, err := p.Exited(); exited {
			t.Fatalf("box: %s exited before it was ready: %v\n%s", p.Name, err, runner.Tail(p.Log, 60))
		}
		last = probe(hc, readyz)
		if last == nil {
			// Any HTTP answer over verified TLS means the webhook server is up.
			var resp *http.Response
			resp, last = hc.Get(webhookURL + "/")
			if last == nil {
				resp.Body.Close()
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("box: %s not ready after 3 minutes: %v\n%s", p.Name, last, runner.Tail(p.Log, 60))
}

func probe(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// freePorts reserves n loopback ports (testbed.ReservePort) until the
// test ends.
func freePorts(t testing.TB, n int) ([]int, error) {
	var ports []int
	for range n {
		p, release, err := testbed.ReservePort()
		if err != nil {
			return nil, err
		}
		t.Cleanup(release)
		ports = append(ports, p)
	}
	return ports, nil
}

// newServingCert makes a CA and a serving certificate for 127.0.0.1 signed
// by it, writes the certificate and key as tls.crt and tls.key (0600) into
// dir, where controller-runtime's webhook server looks, and returns the
// CA's PEM for the caBundles.
func newServingCert(dir string) ([]byte, error) {
	ca, err := pki.NewCA("labctl test box webhook CA")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Serving([]string{"localhost"}, []net.IP{pki.Loopback})
	if err != nil {
		return nil, err
	}
	var errs []error
	errs = append(errs, os.WriteFile(filepath.Join(dir, "tls.crt"), pair.Cert, 0o600))
	errs = append(errs, os.WriteFile(filepath.Join(dir, "tls.key"), pair.Key, 0o600))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("writing the webhook serving certificate: %w", err)
	}
	return ca.PEM, nil
}
