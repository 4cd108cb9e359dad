package box

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
)

// KamajiSource is Kamaji's source at e51909f in the checkout, where
// hack/testenv.sh puts it (a link to ../shared/upstream/kamaji-e51909f):
// the manager is built from it, and its chart is there.
func KamajiSource(t testing.TB) string {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	dir := filepath.Join(root, ".testbed", "src", "kamaji-e51909f")
	if _, err := os.Stat(filepath.Join(dir, "charts", "kamaji", "Chart.yaml")); err != nil {
		msg := fmt.Sprintf("box: Kamaji's source is not at %s; 'hack/testenv.sh kamaji' links it from ../shared/upstream", dir)
		if testbed.Required() || os.Getenv(EnvRequire) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// KamajiChart renders Kamaji's real chart (charts/kamaji of the source)
// into namespace, as `helm template` would, with these values over the
// chart's. The image tag is the test bed's (runner.Images runs it from
// the binary built from the same commit) unless values set one.
func KamajiChart(t testing.TB, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join(KamajiSource(t), "charts", "kamaji"))
	if err != nil {
		t.Fatalf("box: loading Kamaji's chart: %v", err)
	}
	vals := map[string]any{"image": map[string]any{"tag": upstream.TestbedVersions["github.com/clastix/kamaji"]}}
	for k, v := range values {
		vals[k] = v
	}
	in := action.NewInstall(&action.Configuration{})
	in.DryRun, in.ClientOnly, in.Replace, in.IncludeCRDs = true, true, true, true
	in.ReleaseName, in.Namespace = "kamaji", namespace
	// The box's API server's version; the chart asks for >=1.21.
	in.KubeVersion = &chartutil.KubeVersion{Version: "v1.35.4", Major: "1", Minor: "35"}
	rel, err := in.Run(ch, vals)
	if err != nil {
		t.Fatalf("box: rendering Kamaji's chart: %v", err)
	}
	objs, err := kube.ParseObjects("kamaji chart", []byte(rel.Manifest))
	if err != nil {
		t.Fatalf("box: Kamaji's chart: %v", err)
	}
	for _, o := range objs {
		if o.GetNamespace() == "" && namespaced(o.GetKind()) {
			o.SetNamespace(namespace)
		}
	}
	return objs
}

// namespaced are the kinds in Kamaji's chart that helm puts in the
// release's namespace when the template names none.
func namespaced(kind string) bool {
	switch kind {
	case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		return false
	}
	return true
}

// Etcd is a TLS etcd of the test bed for a Kamaji DataStore: its CA's key
// is RSA in PKCS #1, which Kamaji at e51909f requires of a DataStore's CA
// (it refuses PKCS #8, "cannot parse PKCS1").
type Etcd struct {
	// Endpoint is host:port, as a DataStore lists it.
	Endpoint string
	// CACert and CAKey are the CA (PKCS #1 key) that signs the server's
	// certificate and, through Kamaji, each tenant's client certificate.
	CACert, CAKey []byte
	// Client is the root client certificate Kamaji manages the datastore
	// with.
	Client pki.Pair
	hc     *http.Client
}

// StartEtcd runs the test bed's etcd with TLS on loopback (client
// certificates required) beside the box, until the test ends.
func (b *Box) StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	assets := testbed.Assets(t)
	ca, err := pki.NewRSACA("labctl test datastore CA")
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	caKey, err := ca.PKCS1KeyPEM()
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	// Server and client: etcd's JSON gateway dials etcd with it.
	server, err := ca.Leaf(pkix.Name{CommonName: "datastore"}, []string{"localhost"}, []net.IP{pki.Loopback}, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	client, err := ca.Client("root")
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"ca.crt": ca.PEM, "server.crt": server.Cert, "server.key": server.Key}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatalf("box: %v", err)
		}
	}
	ports, err := freePorts(t, 2)
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	client0 := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	b.run(t, "datastore-etcd", filepath.Join(assets, "etcd"), dir,
		"--name=datastore", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client0, "--advertise-client-urls="+client0,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-cluster=datastore=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--cert-file="+filepath.Join(dir, "server.crt"), "--key-file="+filepath.Join(dir, "server.key"),
		"--trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--client-cert-auth")
	pair, err := tls.X509KeyPair(client.Cert, client.Key)
	if err != nil {
		t.Fatalf("box: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	e := &Etcd{Endpoint: "127.0.0.1:" + strconv.Itoa(ports[0]), CACert: ca.PEM, CAKey: caKey, Client: client,
		hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := e.Count(t.Context(), "/")
		if err == nil {
			return e
		}
		if exited, werr := b.Procs["datastore-etcd"].Exited(); exited || time.Now().After(deadline) {
			t.Fatalf("box: the datastore etcd is not serving: %v (exited %v: %v)", err, exited, werr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Count is how many keys the etcd holds under prefix, asked through
// etcd's JSON gateway (/v3/kv/range), as the root client.
func (e *Etcd) Count(ctx context.Context, prefix string) (int64, error) {
	end := []byte(prefix)
	end[len(end)-1]++
	var out struct {
		Count string `json:"count"`
	}
	if err := e.gateway(ctx, "/v3/kv/range", map[string]any{
		"key": base64.StdEncoding.EncodeToString([]byte(prefix)), "range_end": base64.StdEncoding.EncodeToString(end), "count_only": true,
	}, &out); err != nil {
		return 0, fmt.Errorf("counting keys under %s: %w", prefix, err)
	}
	if out.Count == "" {
		return 0, nil
	}
	return strconv.ParseInt(out.Count, 10, 64)
}

// Put writes one key (/v3/kv/put).
func (e *Etcd) Put(ctx context.Context, key, value string) error {
	if err := e.gateway(ctx, "/v3/kv/put", map[string]any{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString([]byte(value)),
	}, nil); err != nil {
		return fmt.Errorf("writing key %s: %w", key, err)
	}
	return nil
}

// Delete removes one key (/v3/kv/deleterange).
func (e *Etcd) Delete(ctx context.Context, key string) error {
	if err := e.gateway(ctx, "/v3/kv/deleterange", map[string]any{"key": base64.StdEncoding.EncodeToString([]byte(key))}, nil); err != nil {
		return fmt.Errorf("deleting key %s: %w", key, err)
	}
	return nil
}

// gateway posts body to etcd's JSON gateway at path and decodes the
// answer into out (when not nil).
func (e *Etcd) gateway(ctx context.Context, path string, body map[string]any, out any) error {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+e.Endpoint+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
