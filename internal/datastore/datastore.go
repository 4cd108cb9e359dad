// Package datastore opens a Kamaji DataStore as Kamaji itself manages it:
// an etcd reached at the DataStore's endpoints with its CA and its root
// client certificate (the kamaji-etcd chart turns etcd's auth on, and the
// certificate's CN, root, is the user). Each tenant keeps its state under
// a prefix of its own, /<schema>/ (Kamaji e51909f
// internal/datastore/etcd.go buildKey; its kube-apiserver runs with
// --etcd-prefix=/<schema>).
//
// An endpoint that is a cluster-internal name (<pod>.<service>.<namespace>.svc…,
// or <service>.<namespace>.svc…, the kamaji-etcd chart's) is reached
// through the API server's port-forward to the Pod, as 'kubectl
// port-forward' does: labctl runs beside the management cluster, not in
// it. Any other endpoint is dialed as it is.
package datastore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/grpclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
)

// KV is one key and its value.
type KV struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// Store is an open etcd DataStore.
type Store struct {
	// Name is the DataStore's.
	Name string
	// Endpoint is the endpoint it was reached at, as the DataStore
	// names it.
	Endpoint string
	client   *clientv3.Client
	stop     func()
}

// Prefix is where Kamaji keeps a tenant whose datastore schema is schema.
func Prefix(schema string) string { return "/" + schema + "/" }

var (
	secretGVK        = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	endpointSliceGVK = schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}
	quietGRPC        sync.Once
)

// Open opens DataStore name of the management cluster kc.
func Open(ctx context.Context, kc *kube.Client, name string) (*Store, error) {
	ds, found, err := kc.Get(ctx, kube.Ref{GVK: clusterapi.DataStoreGVK, Name: name})
	if err != nil {
		return nil, fmt.Errorf("reading Kamaji's DataStore %s: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("Kamaji's DataStore %s does not exist on %s: 'labctl mgmt install' makes it (the kamaji-etcd chart) for a lab with tenants", name, kc.Host())
	}
	if d, _, _ := unstructured.NestedString(ds.Object, "spec", "driver"); d != "etcd" {
		return nil, fmt.Errorf("DataStore %s uses the %s driver: labctl reads etcd DataStores only (the kamaji-etcd chart's)", name, d)
	}
	endpoints, _, _ := unstructured.NestedStringSlice(ds.Object, "spec", "endpoints")
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("DataStore %s lists no endpoints", name)
	}
	cfg, err := tlsConfig(ctx, kc, ds)
	if err != nil {
		return nil, fmt.Errorf("DataStore %s: %w", name, err)
	}
	quietGRPC.Do(func() {
		// grpc-go logs its reconnects on stderr, beside labctl's own
		// progress; each call returns its error anyway.
		grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	})
	var errs []error
	for _, ep := range endpoints {
		s, err := open(ctx, kc, name, ep, cfg)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("reaching DataStore %s: %w", name, errors.Join(errs...))
}

func open(ctx context.Context, kc *kube.Client, name, endpoint string, base *tls.Config) (*Store, error) {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q is not host:port: %w", endpoint, err)
	}
	addr, stop := endpoint, func() {}
	if ns, pod, podPort, inCluster, err := target(ctx, kc, host, port); err != nil {
		return nil, err
	} else if inCluster {
		if addr, stop, err = kc.PortForward(ctx, ns, pod, podPort); err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", endpoint, err)
		}
	}
	cfg := base.Clone()
	// The certificate names the endpoint, whatever address reaches it.
	cfg.ServerName = host
	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{addr}, TLS: cfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: ctx,
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	s := &Store{Name: name, Endpoint: endpoint, client: c, stop: stop}
	// The client dials lazily: ask once, so a wrong certificate, a refused
	// user or a dead etcd fails here, naming the endpoint.
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := c.Get(sctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		s.Close()
		return nil, fmt.Errorf("endpoint %s (through %s): %w", endpoint, addr, err)
	}
	return s, nil
}

// target says where a cluster-internal endpoint leads: the Pod of a
// StatefulSet's DNS name (<pod>.<service>.<namespace>.svc…), or a ready
// Pod behind a Service (<service>.<namespace>.svc…), and the Pod's port.
func target(ctx context.Context, kc *kube.Client, host, port string) (ns, pod string, podPort int, inCluster bool, err error) {
	labels := strings.Split(host, ".")
	svc := -1
	for i, l := range labels {
		if l == "svc" {
			svc = i
			break
		}
	}
	if svc < 2 {
		return "", "", 0, false, nil
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", "", 0, false, fmt.Errorf("endpoint %s:%s: the port is not a number", host, port)
	}
	ns = labels[svc-1]
	if svc == 3 {
		return ns, labels[0], p, true, nil
	}
	service := labels[0]
	slices, err := kc.List(ctx, endpointSliceGVK, ns, "kubernetes.io/service-name="+service)
	if err != nil {
		return "", "", 0, false, fmt.Errorf("finding a Pod behind Service %s/%s: %w", ns, service, err)
	}
	for _, s := range slices {
		eps, _, _ := unstructured.NestedSlice(s.Object, "endpoints")
		for _, e := range eps {
			m, _ := e.(map[string]any)
			ready, found, _ := unstructured.NestedBool(m, "conditions", "ready")
			kind, _, _ := unstructured.NestedString(m, "targetRef", "kind")
			name, _, _ := unstructured.NestedString(m, "targetRef", "name")
			if kind == "Pod" && name != "" && (ready || !found) {
				return ns, name, p, true, nil
			}
		}
	}
	return "", "", 0, false, fmt.Errorf("no ready Pod behind Service %s/%s (endpoint %s:%s)", ns, service, host, port)
}

// tlsConfig is the DataStore's CA and root client certificate, read as
// Kamaji reads them (ContentRef: inline content, or a Secret's key).
func tlsConfig(ctx context.Context, kc *kube.Client, ds *unstructured.Unstructured) (*tls.Config, error) {
	read := func(what string, path ...string) ([]byte, error) {
		ref, found, _ := unstructured.NestedMap(ds.Object, append([]string{"spec", "tlsConfig"}, path...)...)
		if !found {
			return nil, fmt.Errorf("spec.tlsConfig.%s is not set", strings.Join(path, "."))
		}
		if c, ok := ref["content"].(string); ok && c != "" {
			data, err := base64.StdEncoding.DecodeString(c)
			if err != nil {
				return nil, fmt.Errorf("spec.tlsConfig.%s.content: %w", strings.Join(path, "."), err)
			}
			return data, nil
		}
		name, _, _ := unstructured.NestedString(ref, "secretReference", "name")
		ns, _, _ := unstructured.NestedString(ref, "secretReference", "namespace")
		key, _, _ := unstructured.NestedString(ref, "secretReference", "keyPath")
		s, found, err := kc.Get(ctx, kube.Ref{GVK: secretGVK, Namespace: ns, Name: name})
		if err != nil {
			return nil, fmt.Errorf("reading the %s (Secret %s/%s): %w", what, ns, name, err)
		}
		v, _, _ := unstructured.NestedString(s.Object, "data", key)
		if !found || v == "" {
			return nil, fmt.Errorf("the %s is not in Secret %s/%s key %s yet", what, ns, name, key)
		}
		return base64.StdEncoding.DecodeString(v)
	}
	caPEM, err := read("CA certificate", "certificateAuthority", "certificate")
	if err != nil {
		return nil, err
	}
	certPEM, err := read("root client certificate", "clientCertificate", "certificate")
	if err != nil {
		return nil, err
	}
	keyPEM, err := read("root client key", "clientCertificate", "privateKey")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("its CA certificate holds no PEM certificate")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("its root client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// Close ends the connection and its port-forward.
func (s *Store) Close() {
	s.client.Close()
	s.stop()
}

// page is how many keys one Range call returns, so that no answer nears
// gRPC's message limits.
const page = 500

// Keys reads every key under prefix, at one revision (the first page's,
// which the others ask for too), which it returns.
func (s *Store) Keys(ctx context.Context, prefix string) ([]KV, int64, error) {
	var out []KV
	var rev int64
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.client.Get(ctx, key, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("reading the keys under %s of DataStore %s: %w", prefix, s.Name, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			out = append(out, KV{Key: kv.Key, Value: kv.Value})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Count is how many keys lie under prefix.
func (s *Store) Count(ctx context.Context, prefix string) (int64, error) {
	resp, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting the keys under %s of DataStore %s: %w", prefix, s.Name, err)
	}
	return resp.Count, nil
}

// txnOps stays under etcd's --max-txn-ops (128 by default).
const txnOps = 100

// Put writes kvs, a transaction of up to txnOps keys at a time.
func (s *Store) Put(ctx context.Context, kvs []KV) error {
	for start := 0; start < len(kvs); start += txnOps {
		end := min(start+txnOps, len(kvs))
		ops := make([]clientv3.Op, 0, end-start)
		for _, kv := range kvs[start:end] {
			ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
		}
		if _, err := s.client.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("writing keys %d-%d of %d into DataStore %s: %w", start+1, end, len(kvs), s.Name, err)
		}
	}
	return nil
}
