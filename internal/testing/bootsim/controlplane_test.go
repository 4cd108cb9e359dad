package bootsim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/versions"
)

// A control plane that cannot come up (here: an apiServer extraArg
// kube-apiserver refuses) is an error naming the process, with its log,
// and leaves nothing running: etcd, started first, is stopped again.
func TestControlPlaneThatFailsStopsWhatItStarted(t *testing.T) {
	assets := testbed.Assets(t)
	files := map[string][]byte{}
	for _, name := range []string{"ca", "etcd/ca", "front-proxy-ca"} {
		ca, err := pki.NewCA(name)
		if err != nil {
			t.Fatal(err)
		}
		files[pkiDir+"/"+name+".crt"], files[pkiDir+"/"+name+".key"] = ca.PEM, caKeyPEM(t, ca)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	files[pkiDir+"/sa.key"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	files[pkiDir+"/sa.pub"] = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	cc := &ClusterConfiguration{ClusterName: "t", ControlPlaneEndpoint: "127.77.9.30:6443", KubernetesVersion: versions.MustGet().Kubernetes}
	cc.APIServer.ExtraArgs = []kubeadmArg{{Name: "no-such-flag", Value: "x"}}
	nodeIP := net.ParseIP("127.77.9.40")

	_, err = startControlPlane(t.Context(), memberSpec{cluster: cc, node: "cp-0", nodeIP: nodeIP, files: files, assets: assets, dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("error %v, want kube-apiserver's exit with its log naming the flag", err)
	}
	// etcd takes a moment to listen; a leaked one would by now.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", "127.77.9.40:2379", time.Second); err == nil {
			c.Close()
			t.Fatal("etcd listens after the control plane failed")
		}
	}
}

// caKeyPEM is the CA's key in PEM, as a cluster's ca.key.
func caKeyPEM(t *testing.T, ca *pki.CA) []byte {
	t.Helper()
	data, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return data
}
