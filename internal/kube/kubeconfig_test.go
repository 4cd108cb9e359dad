package kube_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/sudotest"
)

// kubeconfigText is a one-context kubeconfig named as k3s names its own:
// everything "default".
func kubeconfigText(server string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: default
  cluster: {server: %s}
users:
- name: default
  user: {token: t0ken}
contexts:
- name: default
  context: {cluster: default, user: default}
current-context: default
`, server)
}

func writeKC(t *testing.T, path, server string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(kubeconfigText(server)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMgmtKubeconfigPrecedence: --kubeconfig (or LABCTL_KUBECONFIG) >
// $KUBECONFIG > the stored one, and each user-visible case says what it
// is.
func TestMgmtKubeconfigPrecedence(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("KUBECONFIG", "")
	stored := filepath.Join(cfg, "labctl", "home", "mgmt.kubeconfig")
	flag := filepath.Join(t.TempDir(), "flag.yaml")
	env := filepath.Join(t.TempDir(), "env.yaml")
	writeKC(t, flag, "https://127.0.0.1:1001")
	writeKC(t, env, "https://127.0.0.1:1002")

	// Nothing stored, nothing named: the user is told to run mgmt up.
	m, err := kube.MgmtKubeconfig("", "home")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Connect(); err == nil || !strings.Contains(err.Error(), "run 'labctl mgmt up', or name one with --kubeconfig or $KUBECONFIG") || !strings.Contains(err.Error(), stored) {
		t.Errorf("nothing stored: err = %v", err)
	}

	writeKC(t, stored, "https://127.0.0.1:1003")
	for _, tc := range []struct {
		name, explicit, env, host, from string
		note                            bool
	}{
		{"stored", "", "", "https://127.0.0.1:1003", kube.FromStored, false},
		{"KUBECONFIG", "", env, "https://127.0.0.1:1002", kube.FromEnv, true},
		{"flag beats KUBECONFIG", flag, env, "https://127.0.0.1:1001", kube.FromFlag, false},
		{"KUBECONFIG naming the stored one", "", stored, "https://127.0.0.1:1003", kube.FromEnv, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			m, err := kube.MgmtKubeconfig(tc.explicit, "home")
			if err != nil {
				t.Fatal(err)
			}
			c, err := m.Connect()
			if err != nil {
				t.Fatal(err)
			}
			if c.Host() != tc.host || m.From != tc.from {
				t.Errorf("host %s from %s, want %s from %s", c.Host(), m.From, tc.host, tc.from)
			}
			if tc.note != (m.Note != "") || (tc.note && !strings.Contains(m.Note, stored)) {
				t.Errorf("note = %q; want one naming the stored kubeconfig: %v", m.Note, tc.note)
			}
		})
	}
}

// TestOwnMgmtKubeconfigIgnoresEnv: mgmt down asks only the lab's own
// management cluster for Clusters, never the one $KUBECONFIG points at.
func TestOwnMgmtKubeconfigIgnoresEnv(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	env := filepath.Join(t.TempDir(), "other.yaml")
	writeKC(t, env, "https://127.0.0.1:7001")
	t.Setenv("KUBECONFIG", env)
	m, err := kube.OwnMgmtKubeconfig("", "home")
	if err != nil {
		t.Fatal(err)
	}
	if m.From != kube.FromStored || m.Path != filepath.Join(cfg, "labctl", "home", "mgmt.kubeconfig") {
		t.Errorf("OwnMgmtKubeconfig = %+v; want the stored path, not $KUBECONFIG", m)
	}
	if _, err := m.Connect(); !errors.Is(err, kube.ErrNoMgmt) {
		t.Errorf("nothing stored: err = %v, want ErrNoMgmt", err)
	}
}

// TestMgmtKubeconfigMissing is '--kubeconfig /nonexistent': the error
// names that file and the flag, not 'run labctl mgmt up'.
func TestMgmtKubeconfigMissing(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	m, _ := kube.MgmtKubeconfig("/nonexistent", "home")
	_, err := m.Connect()
	if err == nil || err.Error() != "kubeconfig /nonexistent does not exist (named by --kubeconfig or LABCTL_KUBECONFIG): check the path" {
		t.Errorf("err = %v", err)
	}
	t.Setenv("KUBECONFIG", "/gone/a"+string(os.PathListSeparator)+"/gone/b")
	m, _ = kube.MgmtKubeconfig("", "home")
	if _, err := m.Connect(); err == nil || !strings.Contains(err.Error(), "$KUBECONFIG names /gone/a, /gone/b, and no such file exists") {
		t.Errorf("KUBECONFIG of missing files: err = %v", err)
	}
}

// TestKubeconfigPathList: KUBECONFIG=a:b merges as kubectl merges: a
// missing file is skipped, the first file's current-context wins.
func TestKubeconfigPathList(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, []byte("apiVersion: v1\nkind: Config\ncurrent-context: other\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := strings.ReplaceAll(kubeconfigText("https://127.0.0.1:2002"), "default", "other")
	if err := os.WriteFile(b, []byte(other), 0o600); err != nil {
		t.Fatal(err)
	}
	sep := string(os.PathListSeparator)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "missing")+sep+a+sep+b)
	m, _ := kube.MgmtKubeconfig("", "home")
	c, err := m.Connect()
	if err != nil {
		t.Fatal(err)
	}
	if c.Host() != "https://127.0.0.1:2002" || c.Context != "other" {
		t.Errorf("merged list: host %s context %s; want b's cluster through a's current-context", c.Host(), c.Context)
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestExportWrite: --write never overwrites without --force.
func TestExportWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lab1.kubeconfig")
	data := []byte(kubeconfigText("https://127.0.0.1:3001"))
	var out, msg bytes.Buffer
	if err := kube.Export(&out, &msg, data, kube.ExportOptions{Write: path}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) || mode(t, path) != 0o600 || out.Len() != 0 {
		t.Errorf("--write: mode %04o, stdout %q", mode(t, path), out.String())
	}
	if err := os.WriteFile(path, []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := kube.Export(&out, &msg, data, kube.ExportOptions{Write: path})
	if got, _ := os.ReadFile(path); err == nil || string(got) != "someone else's" || !strings.Contains(err.Error(), path+" already exists; pass --force") {
		t.Errorf("overwrote without --force: err %v, file %q", err, got)
	}
	if err := kube.Export(&out, &msg, data, kube.ExportOptions{Write: path, Force: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
		t.Error("--force did not overwrite")
	}
}

// TestExportMerge: --merge into ~/.kube/config keeps the other contexts,
// keeps the file 0600, and a second merge replaces its own context.
func TestExportMerge(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SUDO_USER", "")
	t.Setenv("KUBECONFIG", "")
	target := filepath.Join(home, ".kube", "config")
	var out, msg bytes.Buffer

	// Missing: created, with its folder.
	if err := kube.Export(&out, &msg, []byte(kubeconfigText("https://127.0.0.1:4001")), kube.ExportOptions{Merge: true, Name: "labctl-home-mgmt"}); err != nil {
		t.Fatal(err)
	}
	if mode(t, target) != 0o600 || !strings.Contains(msg.String(), "merged context labctl-home-mgmt into "+target) {
		t.Fatalf("mode %04o, message %q", mode(t, target), msg.String())
	}

	// Someone else's context, in a file left world-readable.
	kind := strings.ReplaceAll(kubeconfigText("https://127.0.0.1:5001"), "default", "kind-kind")
	if err := os.WriteFile(target, []byte(kind), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{"https://127.0.0.1:4001", "https://127.0.0.1:4002"} {
		if err := kube.Export(&out, &msg, []byte(kubeconfigText(server)), kube.ExportOptions{Merge: true, Name: "labctl-home-mgmt"}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Contexts) != 2 || cfg.Contexts["kind-kind"] == nil || cfg.Clusters["kind-kind"].Server != "https://127.0.0.1:5001" {
		t.Errorf("the other context was lost: %v", cfg.Contexts)
	}
	if cfg.CurrentContext != "labctl-home-mgmt" || cfg.Clusters["labctl-home-mgmt"].Server != "https://127.0.0.1:4002" || cfg.AuthInfos["labctl-home-mgmt"].Token != "t0ken" {
		t.Errorf("merged context: current %q, clusters %v", cfg.CurrentContext, cfg.Clusters)
	}
	if _, ok := cfg.Clusters["default"]; ok {
		t.Error("k3s's 'default' names went in as they were")
	}
	if mode(t, target) != 0o600 {
		t.Errorf("%s has mode %04o after the merge, want 0600", target, mode(t, target))
	}

	// A file that is no kubeconfig is left alone.
	if err := os.WriteFile(target, []byte("{not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = kube.Export(&out, &msg, []byte(kubeconfigText("https://127.0.0.1:4003")), kube.ExportOptions{Merge: true, Name: "x"})
	if got, _ := os.ReadFile(target); err == nil || string(got) != "{not yaml" || !strings.Contains(err.Error(), "left as it was") {
		t.Errorf("merge into a broken file: err %v, file %q", err, got)
	}
}

// TestStoredUnderSudo is 'sudo labctl mgmt up': the kubeconfig goes where
// the invoking user's next command looks, owned by them, still 0600.
func TestStoredUnderSudo(t *testing.T) {
	home := t.TempDir()
	sudotest.Fake(t, "alice", 4242, 4343, home)
	p, err := kube.MgmtKubeconfigPath("local")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, ".config", "labctl", "local", "mgmt.kubeconfig"); p != want {
		t.Fatalf("stored kubeconfig at %s, want %s", p, want)
	}
	if err := files.WritePrivate(p, []byte(kubeconfigText("https://127.0.0.1:6001"))); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p, filepath.Dir(p), filepath.Join(home, ".config")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("%s is owned by %d:%d, want alice's 4242:4343", f, st.Uid, st.Gid)
		}
	}
	if mode(t, p) != 0o600 {
		t.Errorf("mode %04o, want 0600", mode(t, p))
	}
}

// TestMergeNeverChangesStoredKubeconfigs: with $KUBECONFIG at the kubeconfig
// labctl stored for a lab (as the README says to export), a --merge must
// leave that file as it was. Alone in $KUBECONFIG it is refused with the
// fix; in a list, the merge goes to the next file, as kubectl would pick.
func TestMergeNeverChangesStoredKubeconfigs(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SUDO_USER", "")
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	stored, err := kube.MgmtKubeconfigPath("home")
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.WriteKubeconfig(stored, []byte(kubeconfigText("https://127.0.0.1:4001")), false); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(stored)
	workload := []byte(kubeconfigText("https://127.0.0.1:6443"))
	var out, msg bytes.Buffer

	// Alone, and through a symlink to it: refused, the file unchanged.
	link := filepath.Join(home, "mgmt-link")
	if err := os.Symlink(stored, link); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{stored, link} {
		t.Setenv("KUBECONFIG", env)
		err := kube.Export(&out, &msg, workload, kube.ExportOptions{Merge: true, Name: "labctl-lab1"})
		if err == nil || !strings.Contains(err.Error(), "labctl never merges into the kubeconfig it stored for a lab") ||
			!strings.Contains(err.Error(), "--write") || !strings.Contains(err.Error(), env) {
			t.Errorf("KUBECONFIG=%s: err %v; want a refusal naming it and --write", env, err)
		}
		if now, _ := os.ReadFile(stored); !bytes.Equal(now, before) {
			t.Fatalf("KUBECONFIG=%s: the stored kubeconfig changed:\n%s", env, now)
		}
	}

	// In a list with the user's own file: merged there.
	own := filepath.Join(home, ".kube", "config")
	t.Setenv("KUBECONFIG", stored+string(filepath.ListSeparator)+own)
	msg.Reset()
	if err := kube.Export(&out, &msg, workload, kube.ExportOptions{Merge: true, Name: "labctl-lab1"}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(stored); !bytes.Equal(now, before) {
		t.Fatalf("the stored kubeconfig changed:\n%s", now)
	}
	cfg, err := clientcmd.LoadFromFile(own)
	if err != nil || cfg.CurrentContext != "labctl-lab1" || !strings.Contains(msg.String(), "into "+own) {
		t.Errorf("merge into %s: %v, current %v, message %q", own, err, cfg, msg.String())
	}
}

// TestOwnMgmtSaysItIgnoresKUBECONFIG: mgmt down reaches only the lab's
// stored kubeconfig, and says so when $KUBECONFIG names another.
func TestOwnMgmtSaysItIgnoresKUBECONFIG(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "/elsewhere/config")
	m, err := kube.OwnMgmtKubeconfig("", "home")
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := kube.MgmtKubeconfigPath("home")
	if m.Path != stored || !strings.Contains(m.Note, "not $KUBECONFIG (/elsewhere/config)") || !strings.Contains(m.Note, "--kubeconfig") {
		t.Errorf("path %s, note %q", m.Path, m.Note)
	}
	if m, _ := kube.OwnMgmtKubeconfig("/named", "home"); m.Note != "" {
		t.Errorf("--kubeconfig given, yet a note: %q", m.Note)
	}
	t.Setenv("KUBECONFIG", stored)
	if m, _ := kube.OwnMgmtKubeconfig("", "home"); m.Note != "" {
		t.Errorf("$KUBECONFIG is the stored one, yet a note: %q", m.Note)
	}
}
