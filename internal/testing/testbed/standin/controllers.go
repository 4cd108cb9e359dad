package standin

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/helm"
)

// tick is how often the stand-in controllers look. Real controllers watch;
// these stand-ins only need to be prompt enough for tests.
const tick = 50 * time.Millisecond

// ProviderGVRs are cluster-api-operator's provider kinds.
var ProviderGVRs = []schema.GroupVersionResource{
	{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Resource: "coreproviders"},
	{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Resource: "bootstrapproviders"},
	{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Resource: "controlplaneproviders"},
	{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Resource: "infrastructureproviders"},
	{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Resource: "ipamproviders"},
}

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	helmChartsGVR  = schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmcharts"}
)

// Controller is a running stand-in; Stop ends it (tests' cleanup does too).
type Controller struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	skip    map[string]bool
	handled int
}

// Skip makes the stand-in ignore objects with these names, so a test can
// see what labctl does when a controller never gets to them.
func (c *Controller) Skip(names ...string) *Controller {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.skip[n] = true
	}
	return c
}

// Handled is how many objects the stand-in has acted on.
func (c *Controller) Handled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handled
}

// Stop ends the stand-in and waits for it.
func (c *Controller) Stop() {
	c.cancel()
	<-c.done
}

func (c *Controller) skipped(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.skip[name]
}

func (c *Controller) count() {
	c.mu.Lock()
	c.handled++
	c.mu.Unlock()
}

// run calls step every tick until the test ends or Stop.
func run(t testing.TB, name string, step func(ctx context.Context, c *Controller)) *Controller {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{name: name, cancel: cancel, done: make(chan struct{}), skip: map[string]bool{}}
	t.Cleanup(c.Stop)
	go func() {
		defer close(c.done)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			step(ctx, c)
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	return c
}

// seen remembers when a stand-in first saw each generation of an object.
type seen map[string]time.Time

func (s seen) due(o *unstructured.Unstructured, delay time.Duration) bool {
	k := fmt.Sprintf("%s/%s/%s@%d", o.GetKind(), o.GetNamespace(), o.GetName(), o.GetGeneration())
	first, ok := s[k]
	if !ok {
		s[k] = time.Now()
		return delay <= 0
	}
	return time.Since(first) >= delay
}

func logf(t testing.TB, format string, args ...any) {
	// t.Logf panics once the test has ended; the stand-ins may outlive a
	// subtest by one tick.
	defer func() { _ = recover() }()
	t.Logf(format, args...)
}

// PlayDeployments stands in for the deployment controller, which the test
// bed does not run: delay after a Deployment (or a new generation of it)
// appears, it marks it Available.
func PlayDeployments(t testing.TB, cfg *rest.Config, delay time.Duration) *Controller {
	dc := dynamic.NewForConfigOrDie(cfg)
	s := seen{}
	return run(t, "deployment controller", func(ctx context.Context, c *Controller) {
		l, err := dc.Resource(deploymentsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for i := range l.Items {
			d := &l.Items[i]
			if c.skipped(d.GetName()) || available(d) || !s.due(d, delay) {
				continue
			}
			now := time.Now().UTC().Format(time.RFC3339)
			_ = unstructured.SetNestedField(d.Object, d.GetGeneration(), "status", "observedGeneration")
			_ = unstructured.SetNestedField(d.Object, int64(1), "status", "replicas")
			_ = unstructured.SetNestedField(d.Object, int64(1), "status", "readyReplicas")
			_ = unstructured.SetNestedField(d.Object, int64(1), "status", "availableReplicas")
			_ = unstructured.SetNestedSlice(d.Object, []any{map[string]any{
				"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
				"message": "stand-in deployment controller", "lastTransitionTime": now, "lastUpdateTime": now,
			}}, "status", "conditions")
			if _, err := dc.Resource(deploymentsGVR).Namespace(d.GetNamespace()).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err == nil {
				c.count()
				logf(t, "stand-in deployment controller: Deployment %s/%s is Available", d.GetNamespace(), d.GetName())
			}
		}
	})
}

func available(d *unstructured.Unstructured) bool {
	obs, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration")
	if obs < d.GetGeneration() {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(d.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Available" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// PlayOperator stands in for cluster-api-operator: delay after a Provider
// CR (or a new generation of it) appears, it reports it Ready with
// status.installedVersion = spec.version, as the operator does once the
// provider's controller runs.
func PlayOperator(t testing.TB, cfg *rest.Config, delay time.Duration) *Controller {
	dc := dynamic.NewForConfigOrDie(cfg)
	s := seen{}
	return run(t, "cluster-api-operator", func(ctx context.Context, c *Controller) {
		for _, gvr := range ProviderGVRs {
			l, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue // the operator's CRDs are not installed yet
			}
			for i := range l.Items {
				p := &l.Items[i]
				want, _, _ := unstructured.NestedString(p.Object, "spec", "version")
				have, _, _ := unstructured.NestedString(p.Object, "status", "installedVersion")
				obs, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration")
				if c.skipped(p.GetName()) || (have == want && obs == p.GetGeneration()) || !s.due(p, delay) {
					continue
				}
				now := time.Now().UTC().Format(time.RFC3339)
				_ = unstructured.SetNestedField(p.Object, want, "status", "installedVersion")
				_ = unstructured.SetNestedField(p.Object, p.GetGeneration(), "status", "observedGeneration")
				_ = unstructured.SetNestedSlice(p.Object, []any{map[string]any{
					"type": "Ready", "status": "True", "reason": "StandIn",
					"message": "stand-in cluster-api-operator", "lastTransitionTime": now,
				}}, "status", "conditions")
				if _, err := dc.Resource(gvr).Namespace(p.GetNamespace()).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err == nil {
					c.count()
					logf(t, "stand-in cluster-api-operator: %s %s/%s is Ready at %s", p.GetKind(), p.GetNamespace(), p.GetName(), want)
				}
			}
		}
	})
}

// PlayHelmController stands in for k3s's helm-controller: for each
// HelmChart (and each new generation of one) it installs the chart with the
// real Helm SDK, from spec.chartContent or from spec.repo at spec.version,
// with spec.valuesContent, into spec.targetNamespace.
func PlayHelmController(t testing.TB, cfg *rest.Config) *Controller {
	dc := dynamic.NewForConfigOrDie(cfg)
	hc := helm.New(cfg)
	done := map[string]bool{}
	tmp := t.TempDir()
	return run(t, "helm-controller", func(ctx context.Context, c *Controller) {
		l, err := dc.Resource(helmChartsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for i := range l.Items {
			h := &l.Items[i]
			key := fmt.Sprintf("%s/%s@%d", h.GetNamespace(), h.GetName(), h.GetGeneration())
			if done[key] || c.skipped(h.GetName()) {
				continue
			}
			spec, _, _ := unstructured.NestedMap(h.Object, "spec")
			str := func(k string) string { v, _ := spec[k].(string); return v }
			ch := helm.Chart{Name: str("chart"), Version: str("version"), Repo: str("repo")}
			if content := str("chartContent"); content != "" {
				data, err := base64.StdEncoding.DecodeString(content)
				if err != nil {
					t.Errorf("stand-in helm-controller: HelmChart %s: chartContent: %v", key, err)
					done[key] = true
					continue
				}
				ch.File = filepath.Join(tmp, h.GetName()+".tgz")
				if err := os.WriteFile(ch.File, data, 0o600); err != nil {
					t.Error(err)
					continue
				}
				loaded, err := loader.Load(ch.File)
				if err != nil {
					t.Errorf("stand-in helm-controller: HelmChart %s: chartContent: %v", key, err)
					done[key] = true
					continue
				}
				ch.Name, ch.Version = loaded.Metadata.Name, loaded.Metadata.Version
			}
			values := map[string]any{}
			if vc := str("valuesContent"); vc != "" {
				if err := yaml.Unmarshal([]byte(vc), &values); err != nil {
					t.Errorf("stand-in helm-controller: HelmChart %s: valuesContent: %v", key, err)
					done[key] = true
					continue
				}
			}
			ns := str("targetNamespace")
			if ns == "" {
				ns = h.GetNamespace()
			}
			if _, err := hc.Ensure(ctx, helm.Release{Name: h.GetName(), Namespace: ns, Chart: ch, Values: values}, time.Minute); err != nil {
				if ctx.Err() == nil {
					logf(t, "stand-in helm-controller: HelmChart %s: %v (will retry)", key, err)
				}
				continue
			}
			done[key] = true
			c.count()
			logf(t, "stand-in helm-controller: installed HelmChart %s: chart %s into %s", key, ch, ns)
		}
	})
}
