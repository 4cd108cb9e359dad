// Package integration runs the built labctl binary as a child process
// against a real kube-apiserver (the test bed), as a user would.
package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/packertest"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// secret is what PVE_TOKEN_SECRET holds in the child; it must never show.
const secret = "f3c1a9d2-integration-secret-do-not-print"

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	// The image build tests run this binary as image-builder's packer.
	if packertest.IsStandin() {
		os.Exit(packertest.Main(os.Args))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// labctl builds the binary once per test run, from the module root.
func labctl(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := testbed.ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		binDir, err = os.MkdirTemp("", "labctl-integration-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(binDir, "labctl")
		began := time.Now()
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
			return
		}
		t.Logf("built labctl in %s", time.Since(began).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs labctl in the module root with a clean, private environment:
// its own HOME (holding the SSH public key and the Proxmox CA file
// examples/lab.yaml names) and
// XDG_CONFIG_HOME, and PVE_TOKEN_SECRET set.
func run(t testing.TB, args ...string) result {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv is run with extra environment entries (KEY=value) that win over
// the defaults.
func runEnv(t testing.TB, extra []string, args ...string) result {
	t.Helper()
	bin := labctl(t)
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIntegration test@labctl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testbed.WriteExampleCA(t, home) // the tls.caFile examples/lab.yaml names
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = root
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"PVE_TOKEN_SECRET=" + secret,
		"NO_COLOR=1",
	}
	cmd.Env = append(cmd.Env, extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running labctl %s: %v", strings.Join(args, " "), err)
	}
	// Every byte of both streams, the secret as is and base64-encoded as
	// a Secret's data would hold it.
	for _, s := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))} {
		if strings.Contains(r.stdout, s) || strings.Contains(r.stderr, s) {
			t.Fatalf("labctl %s printed the token secret:\n%s\n%s", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
	return r
}

// report is the part of 'labctl doctor -o json' scripts rely on.
type report struct {
	Config string `json:"config"`
	Lab    string `json:"lab"`
	Checks []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Detail string `json:"detail"`
	} `json:"checks"`
	Management *struct {
		Kubeconfig    string `json:"kubeconfig"`
		Server        string `json:"server"`
		ServerVersion string `json:"serverVersion"`
		Reachable     bool   `json:"reachable"`
		ClusterAPI    *struct {
			Installed      bool     `json:"installed"`
			ServedVersions []string `json:"servedVersions"`
		} `json:"clusterAPI"`
		Operator *struct {
			Installed bool `json:"installed"`
		} `json:"operator"`
	} `json:"management"`
	Failed int `json:"failed"`
}

func (r report) status(t *testing.T, name string) (string, string) {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c.Status, c.Detail
		}
	}
	t.Fatalf("doctor reported no %q check: %+v", name, r.Checks)
	return "", ""
}

func doctorJSON(t *testing.T, kubeconfig string) (report, result) {
	t.Helper()
	res := run(t, "doctor", "--skip-hypervisors", "--kubeconfig", kubeconfig, "-c", "examples/lab.yaml", "-o", "json")
	var rep report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("doctor -o json (exit %d) is not JSON: %v\nstdout:\n%s\nstderr:\n%s", res.code, err, res.stdout, res.stderr)
	}
	if rep.Management == nil || !rep.Management.Reachable {
		t.Fatalf("doctor did not reach the test bed:\n%s", res.stdout)
	}
	return rep, res
}

func TestDoctorWithClusterAPI(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi"))
	rep, res := doctorJSON(t, env.Kubeconfig)

	if res.code != 0 || rep.Failed != 0 {
		t.Errorf("exit %d with %d failed checks, want 0:\n%s", res.code, rep.Failed, res.stdout)
	}
	if rep.Config != "examples/lab.yaml" || rep.Lab != "home" {
		t.Errorf("config %q lab %q, want examples/lab.yaml and home", rep.Config, rep.Lab)
	}
	m := rep.Management
	if m.ServerVersion != "v1.35.4" {
		t.Errorf("serverVersion = %q, want v1.35.4", m.ServerVersion)
	}
	if m.ClusterAPI == nil || !m.ClusterAPI.Installed || !slices.Contains(m.ClusterAPI.ServedVersions, "v1beta2") {
		t.Errorf("clusterAPI = %+v, want installed and serving v1beta2", m.ClusterAPI)
	}
	if st, d := rep.status(t, "cluster api"); st != "ok" || !strings.Contains(d, "v1beta2") {
		t.Errorf("cluster api check: %s %q", st, d)
	}
	if st, _ := rep.status(t, "cluster-api-operator"); st != "warn" || m.Operator == nil || m.Operator.Installed {
		t.Errorf("operator: %s %+v; the test bed has no operator CRDs", st, m.Operator)
	}
	if st, d := rep.status(t, "proxmox pve token secret"); st != "ok" {
		t.Errorf("secret check: %s %q", st, d)
	}
}

func TestDoctorWithoutClusterAPI(t *testing.T) {
	env := testbed.Start(t)
	rep, res := doctorJSON(t, env.Kubeconfig)
	if res.code != 0 {
		t.Errorf("exit %d; a cluster without Cluster API is a warning, not a failure:\n%s", res.code, res.stdout)
	}
	if rep.Management.ServerVersion != "v1.35.4" {
		t.Errorf("serverVersion = %q", rep.Management.ServerVersion)
	}
	if ca := rep.Management.ClusterAPI; ca == nil || ca.Installed {
		t.Errorf("clusterAPI = %+v, want reported as not installed", ca)
	}
	if st, d := rep.status(t, "cluster api"); st != "warn" || !strings.Contains(d, "not installed") {
		t.Errorf("cluster api check: %s %q", st, d)
	}

	// The same, as a table for people.
	text := run(t, "doctor", "--skip-hypervisors", "--kubeconfig", env.Kubeconfig, "-c", "examples/lab.yaml")
	if text.code != 0 || !strings.HasPrefix(text.stdout, "CHECK") || !strings.Contains(text.stdout, "Kubernetes v1.35.4 at https://127.0.0.1:") {
		t.Errorf("doctor text (exit %d):\n%s%s", text.code, text.stdout, text.stderr)
	}
}

func TestDoctorUnreachableFails(t *testing.T) {
	env := testbed.Start(t)
	kc := env.Kubeconfig
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	res := run(t, "doctor", "--skip-hypervisors", "--kubeconfig", kc, "-c", "examples/lab.yaml", "-o", "json")
	var rep report
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, res.stdout)
	}
	if st, _ := rep.status(t, "management cluster"); res.code != 1 || st != "fail" {
		t.Errorf("a stopped server: exit %d, check %s; want exit 1 and fail", res.code, st)
	}
}

func TestVersionJSON(t *testing.T) {
	res := run(t, "version", "-o", "json")
	if res.code != 0 {
		t.Fatalf("labctl version -o json: exit %d\n%s", res.code, res.stderr)
	}
	if !json.Valid([]byte(res.stdout)) {
		t.Fatalf("labctl version -o json is not valid JSON:\n%s", res.stdout)
	}
}

// TestStartsWithoutLibvirt hides libvirt.so.0 (a private mount namespace
// binds /dev/null over it): labctl speaks libvirt's protocol in Go, links
// no libvirt, and works the same without the library.
func TestStartsWithoutLibvirt(t *testing.T) {
	bin := labctl(t)
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(info), "libvirt.org/go/libvirt ") || !strings.Contains(string(info), "github.com/digitalocean/go-libvirt") {
		t.Fatalf("labctl should carry go-libvirt and not the cgo binding:\n%s", info)
	}
	if out, err := exec.Command("ldd", bin).CombinedOutput(); err == nil && strings.Contains(string(out), "libvirt") {
		t.Fatalf("labctl links libvirt:\n%s", out)
	}
	lib, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libvirt.so.0")
	if err != nil || os.Getuid() != 0 {
		t.Skip("needs root and an installed libvirt.so.0 to hide")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare")
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519.pub"), []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINoLibvirt test@labctl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hidden := func(args string) (string, error) {
		script := "mount --bind /dev/null " + lib + " && cd " + home + " && exec " + bin + " " + args
		cmd := exec.CommandContext(t.Context(), "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "NO_COLOR=1"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := hidden("version"); err != nil || !strings.Contains(out, "k3s") {
		t.Fatalf("labctl version without libvirt.so: %v\n%s", err, out)
	}
	if out, err := hidden("config validate"); err != nil {
		t.Fatalf("labctl config validate without libvirt.so: %v\n%s", err, out)
	}
}
