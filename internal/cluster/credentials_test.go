package cluster

import (
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/ui"
)

const testOwnerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"

// mixedLab is config's mixed-pools lab with kvm1's ssh files and kvm2's
// TLS files in a folder of the test's, all 0600.
func mixedLab(t *testing.T) (*config.Lab, map[string]string) {
	t.Helper()
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../config/testdata/valid/mixed-pools.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{testOwnerKey}
	pub, _ := sshtest.UserKey(t)
	dir := t.TempDir()
	files := map[string]string{"key": strings.TrimSuffix(pub, ".pub")}
	for name, content := range map[string]string{"known": "kvm1.lan ssh-ed25519 AAAA\n", "ca": "CA PEM", "cert": "CERT PEM", "tlskey": "KEY PEM"} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range lab.Hypervisors {
		switch lv := lab.Hypervisors[i].Libvirt; lab.Hypervisors[i].Name {
		case "kvm1":
			lv.SSHKeyFile, lv.KnownHostsFile = files["key"], files["known"]
		case "kvm2":
			lv.TLS = &config.LibvirtTLS{CAFile: files["ca"], CertFile: files["cert"], KeyFile: files["tlskey"]}
		}
	}
	return lab, files
}

// The hosts' credentials Secrets get the files lab.yaml names, under the
// keys the provider reads; a key others may read, or one with a
// passphrase the provider cannot enter, is refused naming the field and
// the fix.
func TestCredentialsFromLabFiles(t *testing.T) {
	lab, files := mixedLab(t)
	r, err := Render(lab, "lab1", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Right after the Namespace, before the LibvirtClusters that name them.
	if k := []string{r.Objects[0].GetKind(), r.Objects[1].GetKind(), r.Objects[2].GetKind()}; !slices.Equal(k, []string{"Namespace", "Secret", "Secret"}) {
		t.Errorf("the render starts with %v, want the Namespace and then the two hosts' Secrets", k)
	}
	objs, err := secrets(lab)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(files["key"])
	want := map[string]map[string]string{
		"lab1-libvirt-kvm1": {"ssh-privatekey": string(key), "known_hosts": "kvm1.lan ssh-ed25519 AAAA\n"},
		"lab1-libvirt-kvm2": {"ca.crt": "CA PEM", "tls.crt": "CERT PEM", "tls.key": "KEY PEM"},
	}
	if len(objs) != 2 {
		t.Fatalf("%d Secrets, want 2", len(objs))
	}
	for _, o := range objs {
		var s corev1.Secret
		if err := fromUnstructured(o, &s); err != nil {
			t.Fatal(err)
		}
		w := want[s.Name]
		if len(s.Data) != len(w) {
			t.Errorf("Secret %s has keys %v, want %v", s.Name, keys(s.Data), w)
		}
		for k, v := range w {
			if string(s.Data[k]) != v {
				t.Errorf("Secret %s key %s is not the file's content", s.Name, k)
			}
		}
	}

	if err := os.Chmod(files["key"], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets(lab); err == nil || !strings.Contains(err.Error(), "hypervisors[kvm1].libvirt.sshKeyFile") || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a key readable by others: %v", err)
	}
	if err := os.Chmod(files["key"], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(files["tlskey"], 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets(lab); err == nil || !strings.Contains(err.Error(), "hypervisors[kvm2].libvirt.tls.keyFile") || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a TLS key readable by others: %v", err)
	}
	if err := os.Chmod(files["tlskey"], 0o600); err != nil {
		t.Fatal(err)
	}

	// A key with a passphrase.
	raw, err := ssh.ParseRawPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(raw, "", []byte("secret words"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files["key"], pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets(lab); err == nil || !strings.Contains(err.Error(), "has a passphrase") || !strings.Contains(err.Error(), "hypervisors[kvm1].libvirt.sshKeyFile") {
		t.Errorf("a key with a passphrase: %v", err)
	}
	// A missing known_hosts.
	if err := os.WriteFile(files["key"], key, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(files["known"])
	if _, err := secrets(lab); err == nil || !strings.Contains(err.Error(), "hypervisors[kvm1].libvirt.knownHostsFile") {
		t.Errorf("no known_hosts: %v", err)
	}
}

// 'cluster create --dry-run -o yaml' prints the credentials Secrets with
// no data: the hypervisor whose files fill them, nothing of the files.
func TestPrintObjectsShowsNoCredentials(t *testing.T) {
	lab, files := mixedLab(t)
	io, _, out, _ := ui.Test()
	io.Err = out
	if err := PrintObjects(t.Context(), io, lab, "lab1", "yaml"); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	key, _ := os.ReadFile(files["key"])
	for _, secret := range []string{string(key), "KEY PEM", "PRIVATE KEY"} {
		if strings.Contains(s, secret) {
			t.Errorf("the printed objects hold %q", secret)
		}
	}
	for _, want := range []string{"name: lab1-libvirt-kvm1", clusterapi.AnnotationCredentialsOf + ": kvm1", "type: kubernetes.io/tls", "kind: LibvirtCluster"} {
		if !strings.Contains(s, want) {
			t.Errorf("the printed objects lack %q", want)
		}
	}
}

// secrets renders lab1 of lab and returns its credentials Secrets.
func secrets(lab *config.Lab) ([]*unstructured.Unstructured, error) {
	r, err := Render(lab, "lab1", nil)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == "Secret" {
			out = append(out, o)
		}
	}
	return out, nil
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtimeConverter.FromUnstructured(u.Object, into)
}

var runtimeConverter = runtime.DefaultUnstructuredConverter
