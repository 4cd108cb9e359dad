package kube_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestAgainstTestbed(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi"))
	c, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.Insecure() {
		t.Error("the test bed kubeconfig verifies TLS, but the client says insecure")
	}

	t.Run("ServerVersion", func(t *testing.T) {
		v, err := c.ServerVersion(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.35.4" {
			t.Errorf("server version = %q, want v1.35.4", v.GitVersion)
		}
	})

	t.Run("CRD established", func(t *testing.T) {
		d, err := c.CRD(ctx(t), "clusters.cluster.x-k8s.io")
		if err != nil {
			t.Fatal(err)
		}
		if !d.Found || !d.Established || d.Reason != "" {
			t.Errorf("clusters CRD = %+v, want found and established", d)
		}
		if !d.Serves("v1beta2") || d.Storage != "v1beta2" || d.Kind != "Cluster" {
			t.Errorf("clusters CRD = %+v, want Cluster served and stored as v1beta2", d)
		}
	})

	t.Run("CRD missing", func(t *testing.T) {
		ds, err := c.CRDs(ctx(t), "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", "coreproviders.operator.cluster.x-k8s.io")
		if err != nil {
			t.Fatal(err)
		}
		if !ds[0].Found || !ds[0].Established {
			t.Errorf("KCP CRD = %+v, want established", ds[0])
		}
		if ds[1].Found || ds[1].Established {
			t.Errorf("operator CRD = %+v, want not found", ds[1])
		}
	})

	// A CRD whose names clash with an existing one is created but never
	// established: the server refuses its names.
	t.Run("CRD not established", func(t *testing.T) {
		cl, err := c.Ctrl()
		if err != nil {
			t.Fatal(err)
		}
		clash := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "clusterclones.cluster.x-k8s.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cluster.x-k8s.io",
				Names: apiextensionsv1.CustomResourceDefinitionNames{
					Plural: "clusterclones", Kind: "Cluster", ListKind: "ClusterList", Singular: "cluster",
				},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}},
				}},
			},
		}
		if err := cl.Create(ctx(t), clash); err != nil {
			t.Fatal(err)
		}
		var d kube.CRD
		deadline := time.Now().Add(10 * time.Second)
		for {
			d, err = c.CRD(ctx(t), clash.Name)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason != "" && !strings.Contains(d.Reason, "no Established condition") || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !d.Found || d.Established {
			t.Fatalf("clashing CRD = %+v, want found and not established", d)
		}
		if !strings.Contains(d.Reason, "NamesAccepted=False") {
			t.Errorf("reason = %q, want the NamesAccepted condition", d.Reason)
		}
	})
}

func TestConnectErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.kubeconfig")
	if _, err := kube.Connect(missing); err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Connect(missing) = %v", err)
	}
	garbage := filepath.Join(dir, "garbage.kubeconfig")
	if err := os.WriteFile(garbage, []byte("clusters: [this is not"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Connect(garbage); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Errorf("Connect(garbage) = %v", err)
	}
	empty := filepath.Join(dir, "empty.kubeconfig")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Connect(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("Connect(empty) = %v", err)
	}
}

// An unreachable server gives an error that says what was asked and where.
func TestServerVersionUnreachable(t *testing.T) {
	kc := tokenKubeconfig(t, "127.0.0.1:1")
	c, err := kube.Connect(kc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ServerVersion(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "asking https://127.0.0.1:1 for its version") {
		t.Errorf("ServerVersion = %v", err)
	}
	// Through discovery, whose own words name neither the file nor a fix.
	_, err = c.List(ctx(t), schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}, "", "")
	for _, want := range []string{"the API server at 127.0.0.1:1 (from kubeconfig " + kc + ") cannot be reached", "connection refused", "labctl mgmt status"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("List = %v\nwant %q", err, want)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("List = %v: the cause is lost", err)
	}
}

// A server that accepts the connection and never answers TLS (a hung
// VM, a port that is not an API server) gets the same kind of error as
// one that refuses: the kubeconfig and a fix, not net/http's bare "TLS
// handshake timeout".
func TestHungServerIsExplained(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered, closed at the end
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	kc := tokenKubeconfig(t, ln.Addr().String())
	c, err := kube.Connect(kc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.List(ctx(t), schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}, "", "")
	for _, want := range []string{"the API server at " + ln.Addr().String() + " (from kubeconfig " + kc + ") accepted the connection but did not answer", "labctl mgmt status"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("List = %v\nwant %q", err, want)
		}
	}
}

// tokenKubeconfig writes a kubeconfig for https://addr with a token, and
// returns its path.
func tokenKubeconfig(t *testing.T, addr string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://` + addr + `"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

func TestMgmtKubeconfigPath(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/x/cfg")
	if p, _ := kube.MgmtKubeconfigPath("home"); p != "/x/cfg/labctl/home/mgmt.kubeconfig" {
		t.Errorf("with XDG_CONFIG_HOME: %s", p)
	}
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", "/h")
	if p, _ := kube.MgmtKubeconfigPath("home"); p != "/h/.config/labctl/home/mgmt.kubeconfig" {
		t.Errorf("default: %s", p)
	}
	if _, err := kube.MgmtKubeconfigPath(""); err == nil {
		t.Error("empty lab name accepted")
	}
}
