// Package certmanager stands in for cert-manager v1.21.2 in the test bed,
// whose binaries cannot be built here (the module's cmd/* modules are not
// served). It does cert-manager's job for what the providers' components
// ask of it, copying the behaviour of these files of
// github.com/cert-manager/cert-manager v1.21.2:
//
//   - the controller (pkg/controller/certificates/issuing, and the issuers
//     pkg/issuer/selfsigned/selfsigned.go and pkg/issuer/ca/ca.go): each
//     Certificate whose issuer is a selfSigned or ca Issuer/ClusterIssuer
//     becomes its spec.secretName Secret, type kubernetes.io/tls, with
//     tls.crt, tls.key and ca.crt (for selfSigned, ca.crt is the
//     certificate itself), annotated cert-manager.io/certificate-name,
//     issuer-name, issuer-kind, alt-names, ip-sans and common-name
//     (pkg/apis/certmanager/v1/types.go), and the Certificate gets Ready;
//   - the cainjector (pkg/controller/cainjector/sources.go and
//     injectables.go): each ValidatingWebhookConfiguration,
//     MutatingWebhookConfiguration and CRD (conversion strategy Webhook)
//     annotated cert-manager.io/inject-ca-from (a Certificate, whose
//     Secret must carry its certificate-name) or
//     cert-manager.io/inject-ca-from-secret gets the Secret's ca.crt as
//     its caBundle;
//   - the webhook: its own webhook configurations (those whose Service
//     leads to the cert-manager-webhook Deployment) are removed, since
//     nothing here serves them: Certificates are then admitted without
//     cert-manager's validation;
//   - startupapicheck (the chart's post-install hook Job, cmctl's 'check
//     api'): its Pod is reported Succeeded once a dry-run Certificate
//     create is accepted, so the real Job controller completes the Job and
//     Helm's hook wait ends.
//
// It runs inside the runner: the cert-manager chart's Deployments, when
// applied, are "run" by it (Serve registers their images), and report
// Available.
package certmanager

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/versions"
)

// Annotations cert-manager reads and writes (pkg/apis/certmanager/v1/types.go).
const (
	annInjectCAFrom       = "cert-manager.io/inject-ca-from"
	annInjectCAFromSecret = "cert-manager.io/inject-ca-from-secret"
	annCertificateName    = "cert-manager.io/certificate-name"
	annIssuerName         = "cert-manager.io/issuer-name"
	annIssuerKind         = "cert-manager.io/issuer-kind"
	annAltNames           = "cert-manager.io/alt-names"
	annIPSANs             = "cert-manager.io/ip-sans"
	annCommonName         = "cert-manager.io/common-name"
)

var (
	certificatesGVR   = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	issuersGVR        = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
	clusterIssuersGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "clusterissuers"}
	crdsGVR           = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	validatingGVR     = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	mutatingGVR       = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
)

// Images are cert-manager's images (the chart's image.repository values,
// quay.io/jetstack/<name>), by the part they play.
const (
	ControllerImage      = "cert-manager-controller"
	CAInjectorImage      = "cert-manager-cainjector"
	WebhookImage         = "cert-manager-webhook"
	StartupAPICheckImage = "cert-manager-startupapicheck"
)

// CertManager is the running stand-in.
type CertManager struct {
	cs   kubernetes.Interface
	dyn  dynamic.Interface
	r    *runner.Runner
	pins versions.Pins
}

// Serve makes the runner run cert-manager's Deployments with this
// stand-in. Without those Deployments (the chart not installed) it does
// nothing, as in a cluster without cert-manager.
func Serve(t interface{ Fatalf(string, ...any) }, cfg *rest.Config, r *runner.Runner) *CertManager {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("cert-manager stand-in: %v", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("cert-manager stand-in: %v", err)
	}
	pins, err := versions.Get()
	if err != nil {
		t.Fatalf("cert-manager stand-in: %v", err)
	}
	cm := &CertManager{cs: cs, dyn: dyn, r: r, pins: pins}
	r.Handle(ControllerImage, cm.pinned(cm.controller))
	r.Handle(CAInjectorImage, cm.pinned(cm.cainjector))
	r.Handle(WebhookImage, cm.pinned(cm.webhook))
	r.HandlePods(StartupAPICheckImage, cm.startupAPICheck)
	return cm
}

// pinned runs h only for the pinned version's images.
func (cm *CertManager) pinned(h runner.Handler) runner.Handler {
	return func(ctx context.Context, d *appsv1.Deployment) (bool, string) {
		for _, c := range d.Spec.Template.Spec.Containers {
			if strings.HasSuffix(c.Image, ":"+cm.pins.CertManager) {
				return h(ctx, d)
			}
		}
		return false, "the cert-manager stand-in copies " + cm.pins.CertManager + " only"
	}
}

// controller issues every Certificate whose Secret is missing or stale.
func (cm *CertManager) controller(ctx context.Context, _ *appsv1.Deployment) (bool, string) {
	list, err := cm.dyn.Resource(certificatesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, "listing Certificates: " + err.Error()
	}
	for i := range list.Items {
		if err := cm.issue(ctx, &list.Items[i]); err != nil {
			cm.r.Logf("cert-manager stand-in: Certificate %s/%s: %v", list.Items[i].GetNamespace(), list.Items[i].GetName(), err)
		}
	}
	return true, ""
}

type certSpec struct {
	secret, commonName string
	dns                []string
	ips                []net.IP
	isCA               bool
	issuer, kind       string
	organizations      []string
	// usages are the extended key usages spec.usages asks for.
	usages []x509.ExtKeyUsage
}

func specOf(c *unstructured.Unstructured) certSpec {
	s := certSpec{kind: "Issuer"}
	s.secret, _, _ = unstructured.NestedString(c.Object, "spec", "secretName")
	s.commonName, _, _ = unstructured.NestedString(c.Object, "spec", "commonName")
	s.dns, _, _ = unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
	ips, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "ipAddresses")
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil {
			s.ips = append(s.ips, p)
		}
	}
	s.isCA, _, _ = unstructured.NestedBool(c.Object, "spec", "isCA")
	s.organizations, _, _ = unstructured.NestedStringSlice(c.Object, "spec", "subject", "organizations")
	usages, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "usages")
	for _, u := range usages {
		// pkg/util/pki/kube.go's ExtKeyUsageType: the extended usages;
		// key usages (signing, key encipherment, cert sign) are the
		// pki package's own.
		switch u {
		case "server auth":
			s.usages = append(s.usages, x509.ExtKeyUsageServerAuth)
		case "client auth":
			s.usages = append(s.usages, x509.ExtKeyUsageClientAuth)
		}
	}
	s.issuer, _, _ = unstructured.NestedString(c.Object, "spec", "issuerRef", "name")
	if k, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "kind"); k != "" {
		s.kind = k
	}
	return s
}

// subject is the certificate's subject: spec.commonName (else its first
// name) and spec.subject.organizations, as cert-manager's
// pkg/util/pki/csr.go GenerateCSR builds it.
func (s certSpec) subject(names []string) pkix.Name {
	cn := s.commonName
	if cn == "" && len(names) > 0 {
		cn = names[0]
	}
	return pkix.Name{CommonName: cn, Organization: s.organizations}
}

// ipSANs is the annotation cert-manager writes: the IP SANs, comma
// separated.
func (s certSpec) ipSANs() string {
	var out []string
	for _, ip := range s.ips {
		out = append(out, ip.String())
	}
	return strings.Join(out, ",")
}

// issue writes the Certificate's Secret unless it holds a certificate
// for the same names from the same issuer already (cert-manager's
// issuing controller re-issues only when the Secret no longer matches the
// spec), and marks the Certificate Ready.
func (cm *CertManager) issue(ctx context.Context, c *unstructured.Unstructured) error {
	s := specOf(c)
	if s.secret == "" {
		return fmt.Errorf("spec.secretName is empty")
	}
	ns := c.GetNamespace()
	existing, err := cm.cs.CoreV1().Secrets(ns).Get(ctx, s.secret, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	want := map[string]string{
		annCertificateName: c.GetName(), annIssuerName: s.issuer, annIssuerKind: s.kind,
		annAltNames: strings.Join(s.dns, ","), annIPSANs: s.ipSANs(), annCommonName: s.commonName,
	}
	if err == nil && matches(existing.Annotations, want) && len(existing.Data["tls.crt"]) > 0 {
		return cm.ready(ctx, c)
	}
	pair, caPEM, err := cm.sign(ctx, ns, s)
	if err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.secret, Namespace: ns, Annotations: want},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": pair.Cert, "tls.key": pair.Key, "ca.crt": caPEM},
	}
	if existing != nil && existing.ResourceVersion != "" {
		existing = existing.DeepCopy()
		// A Secret's type cannot change, and cert-manager keeps the
		// type of one that exists (the kamaji-etcd chart makes its
		// certificates' Secrets Opaque and empty first).
		existing.Annotations, existing.Data = want, sec.Data
		_, err = cm.cs.CoreV1().Secrets(ns).Update(ctx, existing, metav1.UpdateOptions{})
	} else {
		_, err = cm.cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s: %w", s.secret, err)
	}
	cm.r.Logf("cert-manager stand-in: issued Certificate %s/%s into Secret %s (%s %s)", ns, c.GetName(), s.secret, s.kind, s.issuer)
	return cm.ready(ctx, c)
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// sign signs the certificate as its issuer would: selfSigned with its own
// key (ca.crt is then the certificate), ca with the key in the issuer's
// spec.ca.secretName.
func (cm *CertManager) sign(ctx context.Context, ns string, s certSpec) (pki.Pair, []byte, error) {
	var issuer *unstructured.Unstructured
	var err error
	issuerNS := ns
	switch s.kind {
	case "Issuer":
		issuer, err = cm.dyn.Resource(issuersGVR).Namespace(ns).Get(ctx, s.issuer, metav1.GetOptions{})
	case "ClusterIssuer":
		// ClusterIssuers read their Secrets from the cluster resource
		// namespace, cert-manager's own by default.
		issuerNS = "cert-manager"
		issuer, err = cm.dyn.Resource(clusterIssuersGVR).Get(ctx, s.issuer, metav1.GetOptions{})
	default:
		return pki.Pair{}, nil, fmt.Errorf("issuerRef.kind %s: the stand-in knows Issuer and ClusterIssuer", s.kind)
	}
	if err != nil {
		return pki.Pair{}, nil, fmt.Errorf("waiting for %s %s: %w", s.kind, s.issuer, err)
	}
	names := s.dns
	if s.commonName != "" && !slices.Contains(names, s.commonName) {
		names = append([]string{s.commonName}, names...)
	}
	if _, ok, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned"); ok {
		// A selfSigned issuer's ca.crt is the certificate itself.
		if s.isCA {
			// A CA for a ca Issuer (the kamaji-etcd chart's): its key
			// ECDSA P-256 in SEC 1, as the chart's privateKey asks
			// and cert-manager's PKCS1 encoding writes it.
			ca, err := pki.NewCA(s.subject(names).CommonName)
			if err != nil {
				return pki.Pair{}, nil, err
			}
			pair, err := ca.Pair()
			return pair, pair.Cert, err
		}
		pair, err := pki.SelfSigned(names, s.ips)
		return pair, pair.Cert, err
	}
	if secretName, ok, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName"); ok {
		sec, err := cm.cs.CoreV1().Secrets(issuerNS).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return pki.Pair{}, nil, fmt.Errorf("waiting for the CA Secret %s/%s of %s %s: %w", issuerNS, secretName, s.kind, s.issuer, err)
		}
		ca, err := pki.LoadCA(sec.Data["tls.crt"], sec.Data["tls.key"])
		if err != nil {
			return pki.Pair{}, nil, fmt.Errorf("CA Secret %s/%s: %w", issuerNS, secretName, err)
		}
		if len(s.usages) == 0 {
			// cert-manager sets no extended usage then, which Go's
			// verification takes as any; server auth is what such
			// certificates serve here.
			pair, err := ca.Serving(names, s.ips)
			return pair, ca.PEM, err
		}
		pair, err := ca.Leaf(s.subject(names), names, s.ips, s.usages...)
		return pair, ca.PEM, err
	}
	return pki.Pair{}, nil, fmt.Errorf("%s %s: the stand-in issues from selfSigned and ca issuers only", s.kind, s.issuer)
}

// ready sets the Certificate's Ready condition, as the readiness
// controller does once the Secret matches.
func (cm *CertManager) ready(ctx context.Context, c *unstructured.Unstructured) error {
	conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, x := range conds {
		if m, _ := x.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
			return nil
		}
	}
	c = c.DeepCopy()
	now := time.Now().UTC()
	_ = unstructured.SetNestedSlice(c.Object, []any{map[string]any{
		"type": "Ready", "status": "True", "reason": "Ready", "message": "Certificate is up to date and has not expired",
		"lastTransitionTime": now.Format(time.RFC3339), "observedGeneration": c.GetGeneration(),
	}}, "status", "conditions")
	_ = unstructured.SetNestedField(c.Object, now.Add(-time.Hour).Format(time.RFC3339), "status", "notBefore")
	_ = unstructured.SetNestedField(c.Object, now.Add(24*time.Hour).Format(time.RFC3339), "status", "notAfter")
	_ = unstructured.SetNestedField(c.Object, int64(1), "status", "revision")
	_, err := cm.dyn.Resource(certificatesGVR).Namespace(c.GetNamespace()).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	return err
}

// cainjector fills caBundles from the annotated sources.
func (cm *CertManager) cainjector(ctx context.Context, _ *appsv1.Deployment) (bool, string) {
	for _, gvr := range []schema.GroupVersionResource{validatingGVR, mutatingGVR, crdsGVR} {
		list, err := cm.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "listing " + gvr.Resource + ": " + err.Error()
		}
		for i := range list.Items {
			o := &list.Items[i]
			ca, err := cm.caFor(ctx, o)
			if err != nil || ca == nil {
				if err != nil {
					cm.r.Logf("cert-manager stand-in: cainjector: %s %s: %v", o.GetKind(), o.GetName(), err)
				}
				continue
			}
			if inject(o, ca) {
				if _, err := cm.dyn.Resource(gvr).Update(ctx, o, metav1.UpdateOptions{}); err != nil {
					cm.r.Logf("cert-manager stand-in: cainjector: updating %s %s: %v", o.GetKind(), o.GetName(), err)
					continue
				}
				cm.r.Logf("cert-manager stand-in: cainjector: injected the CA into %s %s", o.GetKind(), o.GetName())
			}
		}
	}
	return true, ""
}

// caFor reads the CA an object asks for (sources.go), nil when it asks
// for none or the source is not there yet.
func (cm *CertManager) caFor(ctx context.Context, o *unstructured.Unstructured) ([]byte, error) {
	a := o.GetAnnotations()
	if from := a[annInjectCAFrom]; from != "" {
		ns, name, ok := strings.Cut(from, "/")
		if !ok {
			return nil, fmt.Errorf("%s %q needs a namespace/ prefix", annInjectCAFrom, from)
		}
		c, err := cm.dyn.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, dropNotFound(err)
		}
		s := specOf(c)
		sec, err := cm.cs.CoreV1().Secrets(ns).Get(ctx, s.secret, metav1.GetOptions{})
		if err != nil {
			return nil, dropNotFound(err)
		}
		// Only Secrets this Certificate made.
		if sec.Annotations[annCertificateName] != name {
			return nil, nil
		}
		return sec.Data["ca.crt"], nil
	}
	if from := a[annInjectCAFromSecret]; from != "" {
		ns, name, ok := strings.Cut(from, "/")
		if !ok {
			return nil, fmt.Errorf("%s %q needs a namespace/ prefix", annInjectCAFromSecret, from)
		}
		sec, err := cm.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, dropNotFound(err)
		}
		return sec.Data["ca.crt"], nil
	}
	return nil, nil
}

func dropNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// inject sets caBundle where injectables.go does: every webhook's
// clientConfig, or a CRD's conversion webhook when its strategy is
// Webhook. It reports whether anything changed.
func inject(o *unstructured.Unstructured, ca []byte) bool {
	b64 := base64.StdEncoding.EncodeToString(ca)
	changed := false
	switch o.GetKind() {
	case "CustomResourceDefinition":
		if st, _, _ := unstructured.NestedString(o.Object, "spec", "conversion", "strategy"); st != "Webhook" {
			return false
		}
		if cur, _, _ := unstructured.NestedString(o.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle"); cur != b64 {
			_ = unstructured.SetNestedField(o.Object, b64, "spec", "conversion", "webhook", "clientConfig", "caBundle")
			changed = true
		}
	default:
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, h := range hooks {
			m, _ := h.(map[string]any)
			if cur, _, _ := unstructured.NestedString(m, "clientConfig", "caBundle"); cur != b64 {
				_ = unstructured.SetNestedField(m, b64, "clientConfig", "caBundle")
				changed = true
			}
		}
		if changed {
			_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
		}
	}
	return changed
}

// webhook removes cert-manager's own webhook configurations: those whose
// Services select this Deployment's pods.
func (cm *CertManager) webhook(ctx context.Context, d *appsv1.Deployment) (bool, string) {
	svcs, err := cm.cs.CoreV1().Services(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	mine := map[string]bool{}
	for _, s := range svcs.Items {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			mine[s.Name] = true
		}
	}
	for _, gvr := range []schema.GroupVersionResource{validatingGVR, mutatingGVR} {
		list, err := cm.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range list.Items {
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				m, _ := h.(map[string]any)
				ns, _, _ := unstructured.NestedString(m, "clientConfig", "service", "namespace")
				name, _, _ := unstructured.NestedString(m, "clientConfig", "service", "name")
				if ns == d.Namespace && mine[name] {
					if err := cm.dyn.Resource(gvr).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
						return false, err.Error()
					}
					cm.r.Logf("cert-manager stand-in: removed cert-manager's own %s %s (no cert-manager webhook runs here)", o.GetKind(), o.GetName())
					break
				}
			}
		}
	}
	return true, ""
}

// startupAPICheck plays the startupapicheck Pod: cmctl's 'check api'
// passes when the API server accepts a dry-run Certificate, and the Pod
// then ends Succeeded.
func (cm *CertManager) startupAPICheck(ctx context.Context, p *corev1.Pod) (corev1.PodPhase, string) {
	c := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "cmctl-check-api", "namespace": p.Namespace},
		"spec":     map[string]any{"secretName": "cmctl-check-api", "dnsNames": []any{"cmctl-check-api.example.com"}, "issuerRef": map[string]any{"name": "cmctl-check-api"}},
	}}
	_, err := cm.dyn.Resource(certificatesGVR).Namespace(p.Namespace).Create(ctx, c, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return corev1.PodRunning, "check api: " + err.Error()
	}
	return corev1.PodSucceeded, "The cert-manager API is ready"
}
