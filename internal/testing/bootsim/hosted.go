package bootsim

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// HostedControlPlanes tells the sim where the control planes it does not
// boot are: a Kamaji tenant's runs as pods in the management cluster, and
// its workers join it at the tenant's endpoint. lookup returns the admin
// kubeconfig of the cluster whose control plane serves endpoint (the
// tenant's <cluster>-kubeconfig Secret), found false when none does.
// Workers join such a cluster as any other (tokenDiscovery, checkToken),
// and kwok keeps their Nodes and Pods; nothing of the control plane is
// the sim's.
func WithHostedControlPlanes(lookup func(ctx context.Context, endpoint string) (kubeconfig []byte, found bool, err error)) Option {
	return func(s *Sim) { s.hosted = lookup }
}

// hostedCluster is the workload of a hosted control plane serving
// endpoint, started on the first worker that joins it: its admin client,
// kwok and the Cilium stand-in. nil when lookup knows no such cluster.
func (s *Sim) hostedCluster(endpoint string) (*workload, error) {
	if s.hosted == nil {
		return nil, nil
	}
	s.hostedMu.Lock()
	defer s.hostedMu.Unlock()
	s.mu.Lock()
	w := s.clusters[endpoint]
	s.mu.Unlock()
	if w != nil {
		return w, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeoutHosted)
	defer cancel()
	kc, found, err := s.hosted(ctx, endpoint)
	if err != nil || !found {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig of the control plane at %s: %w", endpoint, err)
	}
	dir := filepath.Join(s.dir, "hosted-"+strings.NewReplacer(":", "-", ".", "-").Replace(endpoint))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "admin.conf")
	if err := os.WriteFile(file, kc, 0o600); err != nil {
		return nil, err
	}
	w = &workload{name: endpoint, endpoint: endpoint, dir: dir, caPEM: cfg.CAData, kubeconfig: file}
	if w.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if err := s.startKwok(ctx, w, false); err != nil {
		return nil, err
	}
	s.serve(endpoint, w)
	return w, nil
}

const (
	timeoutHosted    = time.Minute
	timeoutDiscovery = 10 * time.Second
)

// tokenDiscovery is kubeadm join's bootstrap-token discovery
// (cmd/kubeadm/app/discovery/token/token.go, k8s.io/kubernetes v1.35.4):
// it reads kube-public/cluster-info from discovery.bootstrapToken.
// apiServerEndpoint with no credentials and without verifying the server
// (fetchKubeConfigWithTimeout), requires the detached JWS that the
// control plane's bootstrapsigner writes for the token's id under
// jws-kubeconfig-<id> to sign it with the token's secret, and pins the CA
// in it against caCertHashes. It returns that CA.
func tokenDiscovery(ctx context.Context, b *Bootstrap) ([]byte, error) {
	id, secret, ok := strings.Cut(b.Token, ".")
	if !ok {
		return nil, fmt.Errorf("discovery.bootstrapToken.token is not <id>.<secret>")
	}
	anon, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + b.APIServerEndpoint,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, Timeout: timeoutDiscovery})
	if err != nil {
		return nil, err
	}
	cm, err := anon.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading cluster-info at %s without credentials: %w", b.APIServerEndpoint, err)
	}
	content := cm.Data["kubeconfig"]
	sig, ok := cm.Data["jws-kubeconfig-"+id]
	if !ok {
		return nil, fmt.Errorf("token id %q is invalid for this cluster or it has expired (cluster-info, resourceVersion %s, signed for %v, has no jws-kubeconfig-%s: the bootstrapsigner has not signed it)",
			id, cm.ResourceVersion, signedFor(cm), id)
	}
	if !detachedJWSValid(sig, content, id, secret) {
		return nil, fmt.Errorf("failed to verify JWS signature of received cluster info object, can't trust this API Server")
	}
	cfg, err := clientcmd.Load([]byte(content))
	if err != nil {
		return nil, fmt.Errorf("cluster-info's kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		if len(c.CertificateAuthorityData) > 0 {
			return c.CertificateAuthorityData, nil
		}
	}
	return nil, fmt.Errorf("cluster-info's kubeconfig at %s has no certificate-authority-data", b.APIServerEndpoint)
}

// detachedJWSValid checks a detached JWS (RFC 7515 appendix F: the
// compact form with the payload left out, "<header>..<signature>") as
// the bootstrapsigner writes it and kubeadm checks it
// (k8s.io/cluster-bootstrap token/jws: HS256 keyed with the token's
// secret, kid the token's id).
func detachedJWSValid(token, content, id, secret string) bool {
	header, sig, ok := strings.Cut(token, "..")
	if !ok {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		return false
	}
	var h struct{ Alg, Kid string }
	if json.Unmarshal(raw, &h) != nil || h.Alg != "HS256" || h.Kid != id {
		return false
	}
	want, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(header + "." + base64.RawURLEncoding.EncodeToString([]byte(content))))
	return hmac.Equal(mac.Sum(nil), want)
}

// signedFor is the token ids cluster-info holds a signature for.
func signedFor(cm *corev1.ConfigMap) []string {
	var ids []string
	for k := range cm.Data {
		if id, ok := strings.CutPrefix(k, "jws-kubeconfig-"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
