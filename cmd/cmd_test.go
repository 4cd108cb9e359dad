package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// run executes labctl in-process with buffers, as a user's shell would
// with every stream redirected.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runOn(t, terminal{}, stdin, nil, args...)
}

// terminal says which streams are terminals, and whether colour is
// allowed (no NO_COLOR, TERM not dumb), as ui.System would find them.
type terminal struct {
	in, out, err, color bool
}

// runOn executes labctl in-process over fake streams: each is a terminal
// or not as term says. fake, when set, swaps factory functions for fakes.
func runOn(t *testing.T, term terminal, stdin string, fake func(*cmdutil.Factory), args ...string) (code int, stdout, stderr string) {
	t.Helper()
	io, in, out, errb := ui.Test()
	in.WriteString(stdin)
	io.InTTY, io.OutTTY, io.ErrTTY, io.Color = term.in, term.out, term.err, term.color
	f := cmdutil.New(io, &cmdutil.Settings{})
	if fake != nil {
		fake(f)
	}
	code = Run(context.Background(), f, args)
	return code, out.String(), errb.String()
}

func TestVersionJSONHasEveryPin(t *testing.T) {
	code, out, errOut := run(t, "", "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got struct {
		Version string            `json:"version"`
		Pins    map[string]any    `json:"pins"`
		Extra   map[string]string `json:"-"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("version -o json is not JSON: %v\n%s", err, out)
	}
	if got.Version != versions.Version {
		t.Errorf("version = %q, want %q", got.Version, versions.Version)
	}
	for _, k := range []string{"kubernetes", "k3s", "certManager", "clusterAPIOperator", "clusterAPI", "capmox",
		"ipamInCluster", "clusterAutoscaler", "cilium", "kubeVip", "ubuntuImage"} {
		if v, ok := got.Pins[k]; !ok || v == "" {
			t.Errorf("pins.%s missing from version -o json", k)
		}
	}
	// Each is the pin of embedded/versions.yaml, not a copy of it.
	raw, err := json.Marshal(versions.MustGet())
	if err != nil {
		t.Fatal(err)
	}
	var embedded map[string]any
	if err := json.Unmarshal(raw, &embedded); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"certManager", "clusterAPIOperator", "k3s", "clusterAPI", "capmox", "cilium"} {
		if !reflect.DeepEqual(got.Pins[k], embedded[k]) {
			t.Errorf("pins.%s = %v, want versions.yaml's %v", k, got.Pins[k], embedded[k])
		}
	}
}

func TestVersionText(t *testing.T) {
	code, out, _ := run(t, "", "version")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	pins := versions.MustGet()
	for _, want := range []string{"labctl " + versions.Version, "COMPONENT", "k3s", pins.K3s, "cilium", pins.Cilium, pins.UbuntuImage.URL} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escape codes in piped output:\n%q", out)
	}
}

func TestHelpTeaches(t *testing.T) {
	root := NewRoot(testFactory())
	for _, c := range allCommands(root) {
		if c.Short == "" {
			t.Errorf("%s has no short help", c.CommandPath())
		}
		if c.Example == "" {
			t.Errorf("%s has no examples", c.CommandPath())
		}
		code, out, _ := run(t, "", append(strings.Fields(c.CommandPath())[1:], "--help")...)
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("%s --help: exit %d\n%s", c.CommandPath(), code, out)
		}
	}
	_, out, _ := run(t, "", "--help")
	for _, want := range []string{"--config", "--kubeconfig", "--verbose", "--no-color", "config init", "mgmt up"} {
		if !strings.Contains(out, want) {
			t.Errorf("labctl --help lacks %q", want)
		}
	}
}

func allCommands(c *cobra.Command) []*cobra.Command {
	all := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		if sub.Name() == "help" || sub.Hidden {
			continue
		}
		all = append(all, allCommands(sub)...)
	}
	return all
}

// Every runnable command says whether it changes anything (seam.go), so
// that a new command cannot leave --dry-run out unnoticed: one that
// changes things has --dry-run, and one that says neither fails here.
func TestEveryCommandSaysWhatItChanges(t *testing.T) {
	changing := map[string]bool{}
	for _, c := range allCommands(NewRoot(testFactory())) {
		if c.HasSubCommands() { // a group: it prints its help
			continue
		}
		dryRun := c.Flags().Lookup("dry-run") != nil
		switch c.Annotations[effectAnnotation] {
		case effectChanges:
			changing[c.CommandPath()] = true
			if !dryRun {
				t.Errorf("%s changes things but has no --dry-run", c.CommandPath())
			}
		case effectReads:
			if dryRun {
				t.Errorf("%s only reads, yet has --dry-run", c.CommandPath())
			}
		default:
			t.Errorf("%s does not say whether it changes anything: add --dry-run with addDryRunFlag, or call readsOnly", c.CommandPath())
		}
	}
	// The commands the review found changing things say so.
	for _, path := range []string{"mgmt up", "mgmt install", "mgmt down", "mgmt backup", "mgmt restore", "image build",
		"cluster create", "cluster scale", "cluster delete", "scale-test", "config init", "gc"} {
		if !changing["labctl "+path] {
			t.Errorf("labctl %s is not marked as changing things", path)
		}
	}
}

func TestUnknownOutputIsUsageError(t *testing.T) {
	code, _, errOut := run(t, "", "version", "-o", "xml")
	if code != 2 || !strings.Contains(errOut, "--output \"xml\": must be one of text, json, yaml") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, "", "version", "--bogus")
	if code != 2 || !strings.Contains(errOut, "unknown flag: --bogus") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestConfigValidateExamples(t *testing.T) {
	for _, f := range []string{"../examples/lab.yaml", "../examples/local-kvm.yaml", "../examples/lab-tenants.yaml"} {
		code, out, errOut := run(t, "", "config", "validate", "-c", f)
		if code != 0 || !strings.Contains(out, f+" is valid") {
			t.Errorf("validate %s: exit %d\n%s%s", f, code, out, errOut)
		}
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	data, err := os.ReadFile("../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), "max: 5", "max: -1", 1)
	bad = strings.Replace(bad, "podCIDR: 10.244.0.0/16", "podCIDR: 192.168.0.0/16", 1)
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "", "config", "validate", "-c", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, errOut)
	}
	for _, want := range []string{"2 problem(s)", "clusters[0].workers.max: must be >= workers.min (0), got -1",
		"clusters[0].podCIDR: 192.168.0.0/16 overlaps the lab network 192.168.4.0/24", path + ":"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestConfigViewRoundTrip(t *testing.T) {
	code, first, errOut := run(t, "", "config", "view", "-c", "../examples/lab.yaml")
	if code != 0 {
		t.Fatalf("view: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "source: ../examples/lab.yaml") {
		t.Errorf("view does not say its source: %q", errOut)
	}
	if strings.Contains(first, "#") {
		t.Errorf("view output carries comments; the source belongs on stderr")
	}
	code, out, errOut := run(t, first, "config", "validate", "-c", "-")
	if code != 0 || !strings.Contains(out, "stdin is valid") {
		t.Fatalf("validate of view output: exit %d\n%s%s", code, out, errOut)
	}
	code, second, _ := run(t, first, "config", "view", "-c", "-")
	if code != 0 || second != first {
		t.Fatalf("second round trip differs:\n--- first\n%s\n--- second\n%s", first, second)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(first), &doc); err != nil {
		t.Fatalf("view output is not YAML: %v", err)
	}
	if !strings.Contains(first, "env: PVE_TOKEN_SECRET") {
		t.Errorf("the secret reference is missing from view output")
	}
}

func TestConfigViewBuiltInDefault(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("LABCTL_CONFIG", "")
	code, out, errOut := run(t, "", "config", "view")
	if code != 0 || !strings.Contains(errOut, "built-in local-kvm example") || !strings.Contains(out, "qemu:///system") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	// A file the user names must exist: no silent fallback.
	code, _, errOut = run(t, "", "config", "view", "-c", "missing.yaml")
	if code != 1 || !strings.Contains(errOut, "missing.yaml does not exist") || !strings.Contains(errOut, "config init") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	t.Setenv("LABCTL_CONFIG", "from-env.yaml")
	code, _, errOut = run(t, "", "config", "view")
	if code != 1 || !strings.Contains(errOut, "from-env.yaml does not exist") {
		t.Fatalf("LABCTL_CONFIG ignored: exit %d, stderr %q", code, errOut)
	}
}

// 'labctl config view > lab.yaml' has the shell empty lab.yaml before
// labctl reads it: with or without -c, labctl refuses rather than
// printing the built-in lab into the user's file.
func TestConfigViewIntoItsOwnSource(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("LABCTL_CONFIG", "")
	for _, args := range [][]string{{"config", "view"}, {"config", "view", "-c", "lab.yaml"}} {
		out, err := os.Create("lab.yaml") // what '> lab.yaml' does
		if err != nil {
			t.Fatal(err)
		}
		io, _, _, errb := ui.Test()
		io.Out = out
		f := cmdutil.New(io, &cmdutil.Settings{})
		code := Run(context.Background(), f, args)
		out.Close()
		data, _ := os.ReadFile("lab.yaml")
		if code != 1 || len(data) != 0 || !strings.Contains(errb.String(), "lab.yaml is the file the output is redirected into") {
			t.Errorf("labctl %s > lab.yaml: exit %d, %d bytes written, stderr %q; want a refusal", strings.Join(args, " "), code, len(data), errb.String())
		}
	}
}

func TestConfigInit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lab.yaml")
	code, _, errOut := run(t, "", "config", "init", "-c", path, "--dry-run")
	if code != 0 || !strings.Contains(errOut, "would create") {
		t.Fatalf("dry-run: exit %d %q", code, errOut)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("--dry-run wrote the file")
	}
	if code, _, errOut = run(t, "", "config", "init", "-c", path); code != 0 {
		t.Fatalf("init: exit %d %s", code, errOut)
	}
	if code, out, errOut := run(t, "", "config", "validate", "-c", path); code != 0 {
		t.Fatalf("the starter file does not validate: %s%s", out, errOut)
	}
	if err := os.WriteFile(path, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "", "config", "init", "-c", path)
	if data, _ := os.ReadFile(path); code != 1 || string(data) != "mine" || !strings.Contains(errOut, "--force") {
		t.Fatalf("init overwrote without --force: exit %d, %q", code, errOut)
	}
	if code, _, _ = run(t, "", "config", "init", "-c", path, "--force"); code != 0 {
		t.Fatalf("--force: exit %d", code)
	}
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), "apiVersion: labctl.dev/v1alpha1") {
		t.Fatal("--force did not write the starter")
	}
}

func TestClusterCreateDryRunPrintsObjects(t *testing.T) {
	lab := testLab(t)
	code, out, errOut := run(t, "", "cluster", "create", "lab1", "-c", lab, "--dry-run", "-o", "yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"kind: ProxmoxCluster", "kind: KubeadmControlPlane", "kind: MachineDeployment", "name: lab1-worker-2g-", "kind: Deployment"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q", want)
		}
	}
	code, _, errOut = run(t, "", "cluster", "create", "nope", "-c", lab, "--dry-run", "-o", "yaml")
	if code != 1 || !strings.Contains(errOut, `cluster "nope" is not in the lab config; it has: lab1`) {
		t.Errorf("unknown cluster: exit %d, %s", code, errOut)
	}
}

// TestClusterCreateDryRunPrintsTenant: offline, the tenants' example
// prints each tenant as the one manifest kubectl needs: its Namespace,
// one Cluster of a labctl ClusterClass (no control plane or machine
// objects of its own), its addons' ConfigMap and ClusterResourceSet, for a KVM tenant its address pool and the hosts'
// credentials Secrets without data, and its autoscaler.
func TestClusterCreateDryRunPrintsTenant(t *testing.T) {
	lab := testLabFrom(t, "../examples/lab-tenants.yaml")
	for _, tc := range []struct {
		name, class string
		kinds       []string
	}{
		{"tenant1", "labctl-kamaji-proxmox", []string{"Namespace", "Cluster", "ConfigMap", "ConfigMap", "ClusterResourceSet", "ServiceAccount", "ClusterRoleBinding", "Deployment"}},
		{"tenant2", "labctl-kamaji-kvm", []string{"Namespace", "Secret", "Secret", "InClusterIPPool", "Cluster", "ConfigMap", "ConfigMap", "ClusterResourceSet", "ServiceAccount", "ClusterRoleBinding", "Deployment"}},
	} {
		code, out, errOut := run(t, "", "cluster", "create", tc.name, "-c", lab, "--dry-run", "-o", "yaml")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, errOut)
		}
		var kinds []string
		var cluster, crs map[string]any
		// Documents split as kubectl splits them: on a line that is
		// "---" alone (the addons ConfigMap holds indented ones).
		for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(out, -1)[1:] {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v\n%s", tc.name, err, doc)
			}
			kinds = append(kinds, o["kind"].(string))
			switch o["kind"] {
			case "Cluster":
				cluster = o
			case "ClusterResourceSet":
				crs = o
			}
			if o["kind"] == "Secret" && o["data"] != nil {
				t.Errorf("%s: a credentials Secret is printed with its data", tc.name)
			}
		}
		if !slices.Equal(kinds, tc.kinds) {
			t.Errorf("%s: kinds %v, want %v", tc.name, kinds, tc.kinds)
		}
		// Offline, from the chart labctl carries: CoreDNS, then Cilium.
		var applied []string
		for _, r := range crs["spec"].(map[string]any)["resources"].([]any) {
			applied = append(applied, r.(map[string]any)["name"].(string))
		}
		if want := []string{tc.name + "-addons", tc.name + "-cilium"}; !slices.Equal(applied, want) {
			t.Errorf("%s: the ClusterResourceSet applies %v, want %v", tc.name, applied, want)
		}
		if !strings.Contains(out, "name: cilium-operator") || strings.Contains(out, "PRIVATE KEY") {
			t.Errorf("%s: the manifest lacks Cilium's operator, or holds a private key", tc.name)
		}
		topo, _ := cluster["spec"].(map[string]any)["topology"].(map[string]any)
		if ref, _ := topo["classRef"].(map[string]any); ref["name"] != tc.class || ref["namespace"] != "labctl-tenants" {
			t.Errorf("%s: classRef %v, want %s in labctl-tenants", tc.name, topo["classRef"], tc.class)
		}
		for _, md := range topo["workers"].(map[string]any)["machineDeployments"].([]any) {
			if _, has := md.(map[string]any)["replicas"]; has {
				t.Errorf("%s: an autoscaled pool is printed with replicas", tc.name)
			}
		}
	}
}

func TestMgmtInstallFlagErrorsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mgmt", "install", "--charts", "flux"}, `--charts "flux": must be one of auto, helm-controller, helm-sdk`},
		{[]string{"mgmt", "install", "--timeout", "0s"}, "--timeout 0s: must be more than 0"},
		{[]string{"mgmt", "install", "-o", "toml"}, `--output "toml": must be one of text, json, yaml`},
		{[]string{"mgmt", "status", "-o", "toml"}, `--output "toml": must be one of text, json, yaml`},
		{[]string{"mgmt", "install", "-o", "json"}, "-o json prints the objects of a dry run; add --dry-run"},
		{[]string{"cluster", "create", "lab1", "-o", "json"}, "-o yaml/json prints the objects; use it with --dry-run"},
	} {
		code, _, errOut := run(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--help' for usage") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}

func TestMgmtHelpTeaches(t *testing.T) {
	code, out, _ := run(t, "", "mgmt", "install", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"labctl mgmt install --kubeconfig ~/.kube/other --dry-run -o yaml",
		"labctl mgmt install --emit-k3s-manifests ./k3s-manifests",
		"--offline-dir", "--charts", "--timeout", "--wait",
		"field manager \"labctl\"",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mgmt install --help lacks %q", want)
		}
	}
	code, out, _ = run(t, "", "mgmt", "status", "--help")
	if code != 0 || !strings.Contains(out, "labctl mgmt status --kubeconfig ~/.kube/other -o json") || !strings.Contains(out, "Exits 0 when every component is ready, 1 when one is not") {
		t.Errorf("mgmt status --help:\n%s", out)
	}
}

func TestScaleTestDryRunAndUsage(t *testing.T) {
	lab := testLab(t)
	// --dry-run needs no cluster: it only says what would happen.
	code, out, errOut := run(t, "", "scale-test", "lab1", "-c", lab, "--dry-run", "--chart", "lab1.svg")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"namespace labctl-scale-test", "cpu 1500m, memory 512Mi", "scale-up 1→3: set inflate to 5 pods", "scale-down to 0", "scale-from-zero", "remove the inflate pods", "write the chart to lab1.svg"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out)
		}
	}
	// Only the cluster's entry in lab.yaml is read: no render, so no SSH
	// key is needed (the example's ~/.ssh/id_ed25519.pub is missing here).
	t.Setenv("HOME", t.TempDir())
	code, out, errOut = run(t, "", "scale-test", "lab1", "-c", "../examples/lab.yaml", "--dry-run")
	if code != 0 || !strings.Contains(out, "scale-test would:") {
		t.Errorf("scale-test --dry-run without the SSH key: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = run(t, "", "scale-test", "lab1", "-c", lab, "--scenario", "sideways")
	if code != 2 || !strings.Contains(errOut, `--scenario "sideways": must be one of up, down, from-zero, all`) {
		t.Errorf("bad scenario: exit %d, %s", code, errOut)
	}
	// A chart file labctl cannot write is refused at the start, not after
	// the test; the Mgmt given here fails the test if it is reached.
	noCluster := func(f *cmdutil.Factory) {
		f.Mgmt = func(context.Context) (*kube.Client, error) {
			t.Error("scale-test --chart x.jpg reached the management cluster")
			return nil, errors.New("no cluster in this test")
		}
	}
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope", "lab1.png")
	charts := []struct{ chart, want string }{
		{"x.jpg", `--chart "x.jpg": the file must end in .svg or .png`},
		{missing, fmt.Sprintf("--chart %q: the folder %s does not exist; create it", missing, filepath.Dir(missing))},
		{filepath.Join(notDir, "lab1.svg"), fmt.Sprintf("--chart %q: %s is not a folder", filepath.Join(notDir, "lab1.svg"), notDir)},
	}
	if os.Geteuid() != 0 { // root writes in any folder
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		charts = append(charts, struct{ chart, want string }{filepath.Join(ro, "lab1.svg"), fmt.Sprintf("--chart %q: cannot write in the folder %s (permission denied)", filepath.Join(ro, "lab1.svg"), ro)})
	}
	for _, c := range charts {
		for _, args := range [][]string{{"--chart", c.chart}, {"--chart", c.chart, "--dry-run"}} {
			if strings.HasSuffix(c.want, "(permission denied)") && len(args) == 3 {
				continue // a dry run makes no file to find out
			}
			code, _, errOut = runOn(t, terminal{}, "", noCluster, append([]string{"scale-test", "lab1", "-c", lab}, args...)...)
			if code != 2 || !strings.Contains(errOut, "Error: "+c.want) || !strings.Contains(errOut, "labctl scale-test --help") {
				t.Errorf("scale-test %v: exit %d, %s; want exit 2 and %q", args, code, errOut, c.want)
			}
		}
	}
	// A folder it can write in passes, and the check leaves nothing there.
	ok := filepath.Join(dir, "ok")
	if err := os.Mkdir(ok, 0o700); err != nil {
		t.Fatal(err)
	}
	noMgmt := func(f *cmdutil.Factory) {
		f.Mgmt = func(context.Context) (*kube.Client, error) { return nil, errors.New("no cluster in this test") }
	}
	code, _, errOut = runOn(t, terminal{}, "", noMgmt, "scale-test", "lab1", "-c", lab, "--chart", filepath.Join(ok, "lab1.svg"))
	if code != 1 || strings.Contains(errOut, "--chart") {
		t.Errorf("scale-test --chart in a writable folder: exit %d, %s", code, errOut)
	}
	if entries, _ := os.ReadDir(ok); len(entries) != 0 {
		t.Errorf("the chart check left files behind: %v", entries)
	}
	code, _, errOut = run(t, "", "scale-test", "nope", "-c", lab, "--dry-run")
	if code != 1 || !strings.Contains(errOut, `cluster "nope" is not in the lab config`) {
		t.Errorf("unknown cluster: exit %d, %s", code, errOut)
	}
	// Without a management cluster it says how to get one.
	code, _, errOut = run(t, "", "scale-test", "lab1", "-c", lab, "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("no management cluster: exit %d, %s", code, errOut)
	}
}
