package runner

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
)

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // kubelet's probes do not verify

// webhooks points webhook clientConfigs that name a Service at the local
// process behind it. It remembers each rewritten webhook's Service, so a
// process that restarts on other ports is followed.
type webhooks struct {
	r   *Runner
	ext apiextensionsclient.Interface

	mu sync.Mutex
	// services remembers the Service each rewritten clientConfig named, by
	// kind/name/webhook.
	services map[string]admissionregistrationv1.ServiceReference
}

func newWebhooks(cfg *rest.Config, r *Runner) *webhooks {
	return &webhooks{r: r, ext: apiextensionsclient.NewForConfigOrDie(cfg), services: map[string]admissionregistrationv1.ServiceReference{}}
}

// url resolves a Service reference to the local process behind it:
// https://127.0.0.1:<the process's port for the Service's targetPort><path>.
func (w *webhooks) url(ctx context.Context, svc admissionregistrationv1.ServiceReference) (string, bool) {
	s, err := w.r.cs.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil || len(s.Spec.Selector) == 0 {
		return "", false
	}
	var port int32 = 443
	if svc.Port != nil {
		port = *svc.Port
	}
	var target *intstr.IntOrString
	for _, sp := range s.Spec.Ports {
		if sp.Port == port {
			t := sp.TargetPort
			if t.Type == intstr.Int && t.IntVal == 0 {
				t = intstr.FromInt32(sp.Port)
			}
			target = &t
		}
	}
	if target == nil {
		return "", false
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	for _, p := range w.r.Procs() {
		ns, name, _ := strings.Cut(p.Deployment, "/")
		if !p.Running() || ns != svc.Namespace || !sel.Matches(labels.Set(p.labels)) {
			continue
		}
		d, err := w.r.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		c, _, ok := w.r.container(d)
		if !ok {
			continue
		}
		local, ok := p.localPort(c, *target)
		if !ok {
			continue
		}
		path := ""
		if svc.Path != nil {
			path = *svc.Path
		}
		return "https://127.0.0.1:" + strconv.Itoa(local) + path, true
	}
	return "", false
}

// resolve gives the clientConfig that reaches the process: the URL, and
// the caBundle kept. ok is false when nothing here serves it (yet).
func (w *webhooks) resolve(ctx context.Context, key string, cc admissionregistrationv1.WebhookClientConfig) (admissionregistrationv1.WebhookClientConfig, bool) {
	w.mu.Lock()
	svc, known := w.services[key]
	w.mu.Unlock()
	if cc.Service != nil {
		svc, known = *cc.Service, true
	}
	if !known {
		return cc, false
	}
	u, ok := w.url(ctx, svc)
	if !ok {
		return cc, false
	}
	w.mu.Lock()
	w.services[key] = svc
	w.mu.Unlock()
	return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: cc.CABundle}, true
}

func sameClientConfig(a, b admissionregistrationv1.WebhookClientConfig) bool {
	return a.Service == nil && b.Service == nil && a.URL != nil && b.URL != nil && *a.URL == *b.URL && string(a.CABundle) == string(b.CABundle)
}

// point rewrites every webhook configuration and CRD conversion webhook
// that a process here serves.
func (w *webhooks) point(ctx context.Context) {
	cs := w.r.cs.AdmissionregistrationV1()
	if vs, err := cs.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range vs.Items {
			v := &vs.Items[i]
			changed := false
			for j := range v.Webhooks {
				h := &v.Webhooks[j]
				if cc, ok := w.resolve(ctx, "validating/"+v.Name+"/"+h.Name, h.ClientConfig); ok && !sameClientConfig(cc, h.ClientConfig) {
					h.ClientConfig, changed = cc, true
				}
			}
			if changed {
				w.write(func() error {
					_, err := cs.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
					return err
				}, "ValidatingWebhookConfiguration "+v.Name)
			}
		}
	}
	if ms, err := cs.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err == nil {
		for i := range ms.Items {
			m := &ms.Items[i]
			changed := false
			for j := range m.Webhooks {
				h := &m.Webhooks[j]
				if cc, ok := w.resolve(ctx, "mutating/"+m.Name+"/"+h.Name, h.ClientConfig); ok && !sameClientConfig(cc, h.ClientConfig) {
					h.ClientConfig, changed = cc, true
				}
			}
			if changed {
				w.write(func() error {
					_, err := cs.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
					return err
				}, "MutatingWebhookConfiguration "+m.Name)
			}
		}
	}
	crds, err := w.ext.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		cv := crd.Spec.Conversion
		if cv == nil || cv.Strategy != apiextensionsv1.WebhookConverter || cv.Webhook == nil || cv.Webhook.ClientConfig == nil {
			continue
		}
		in := *cv.Webhook.ClientConfig
		cc := admissionregistrationv1.WebhookClientConfig{URL: in.URL, CABundle: in.CABundle}
		if in.Service != nil {
			cc.Service = &admissionregistrationv1.ServiceReference{Namespace: in.Service.Namespace, Name: in.Service.Name, Path: in.Service.Path, Port: in.Service.Port}
		}
		got, ok := w.resolve(ctx, "crd/"+crd.Name, cc)
		if !ok || sameClientConfig(got, cc) {
			continue
		}
		cv.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: got.URL, CABundle: got.CABundle}
		w.write(func() error {
			_, err := w.ext.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
			return err
		}, "CRD "+crd.Name)
	}
}

func (w *webhooks) write(update func() error, what string) {
	if err := update(); err != nil {
		w.r.logf("pointing %s at its local process: %v (will retry)", what, err)
		w.r.Kick()
		return
	}
	w.r.logf("pointed %s at its local process", what)
}

// String is for logs.
func (p *Proc) String() string { return fmt.Sprintf("%s (%s)", p.Deployment, p.Image.Binary) }
