package cmd

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// complete asks cobra's __complete, as the shell scripts do, and returns
// the candidates (the last line is cobra's directive).
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	code, out, errOut := run(t, "", append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d\n%s", args, code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], ":") {
		t.Fatalf("__complete %v: no directive line:\n%s", args, out)
	}
	var names []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t")
		names = append(names, name)
	}
	return names
}

func TestCompletion(t *testing.T) {
	lab := testLab(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "delete", "-c", lab, ""}, "lab1"},
		{[]string{"cluster", "create", "-c", lab, "l"}, "lab1"},
		{[]string{"scale-test", "-c", lab, ""}, "lab1"},
		{[]string{"image", "build", "-c", lab, ""}, "ubuntu-2404-kube"},
		{[]string{"scale-test", "lab1", "--scenario", ""}, "up down from-zero all"},
		{[]string{"version", "-o", ""}, "text json yaml"},
		{[]string{"cluster", "list", "-o", ""}, "text json yaml"},
		{[]string{"cluster", "create", "lab1", "-o", ""}, "yaml json"},
		{[]string{"config", "view", "-o", ""}, "yaml json"},
		{[]string{"cluster", "delete", "lab1", ""}, ""}, // one NAME only
	} {
		if got := strings.Join(complete(t, tc.args...), " "); got != tc.want {
			t.Errorf("complete %q: got %q, want %q", tc.args, got, tc.want)
		}
	}
	// LABCTL_CONFIG is honoured as -c is.
	t.Setenv("LABCTL_CONFIG", lab)
	if got := strings.Join(complete(t, "cluster", "describe", ""), " "); got != "lab1" {
		t.Errorf("complete with LABCTL_CONFIG: %q", got)
	}
}

// -o json is JSON on stdout on every command that takes -o, whatever else
// the command reports on stderr, and it holds what the command reports.
func TestOutputJSONEverywhere(t *testing.T) {
	lab := testLab(t)
	env := testbed.Start(t, testbed.WithCRDs("capi"))
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("PVE_TOKEN_SECRET", "not-used-by-these")
	mgmt := func(f *cmdutil.Factory) {
		// The management cluster comes through the factory: the test
		// bed's real API server with Cluster API's CRDs.
		f.Mgmt = func(context.Context) (*kube.Client, error) { return kube.Connect(env.Kubeconfig) }
	}
	server, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	_, pveLab := proxmoxLab(t)
	pins := versions.MustGet()
	for _, tc := range []struct {
		args []string
		fake func(*cmdutil.Factory)
		code int
		// want maps a path in the JSON (a.b[0].c; "len" for an array's
		// length) to its value; nonEmpty for an array with something in it.
		want map[string]any
	}{
		{[]string{"version"}, nil, 0, map[string]any{"version": versions.Version, "pins.k3s": pins.K3s, "pins.cilium": pins.Cilium}},
		{[]string{"config", "view", "-c", lab}, nil, 0, map[string]any{"kind": "Lab", "metadata.name": "home", "clusters[0].name": "lab1"}},
		{[]string{"doctor", "-c", lab, "--skip-hypervisors", "--kubeconfig", env.Kubeconfig}, nil, 0, map[string]any{"lab": "home", "config": lab, "checks": nonEmpty{}}},
		{[]string{"scale-test", "lab1", "-c", lab, "--dry-run"}, nil, 0, map[string]any{"cluster": "lab1", "scenario": "all", "steps": nonEmpty{}}},
		{[]string{"cluster", "create", "lab1", "-c", lab, "--dry-run"}, nil, 0, map[string]any{"kind": "List", "items": nonEmpty{}}},
		{[]string{"cluster", "list", "-c", lab}, mgmt, 0, map[string]any{"len": 0.0}},
		{[]string{"mgmt", "status", "-c", lab}, mgmt, 1, map[string]any{"ready": false, "server": server.Host(), "charts": "helm-sdk"}}, // nothing installed: not ready
		{[]string{"image", "list", "-c", pveLab}, nil, 0, map[string]any{"len": 0.0}},
	} {
		args := append(tc.args, "-o", "json")
		code, out, errOut := runOn(t, terminal{out: false, err: true, color: true}, "", tc.fake, args...)
		if code != tc.code {
			t.Errorf("labctl %s: exit %d, want %d\n%s", strings.Join(args, " "), code, tc.code, errOut)
			continue
		}
		what := strings.Join(tc.args, " ")
		isJSON(t, what, out)
		var doc any
		_ = json.Unmarshal([]byte(out), &doc)
		for path, want := range tc.want {
			got, ok := jsonAt(doc, path)
			switch want.(type) {
			case nonEmpty:
				if l, isList := got.([]any); !ok || !isList || len(l) == 0 {
					t.Errorf("%s -o json: %s is %v, want a list with something in it", what, path, got)
				}
			default:
				if !ok || got != want {
					t.Errorf("%s -o json: %s is %v, want %v\n%.400s", what, path, got, want, out)
				}
			}
		}
	}
}

// nonEmpty stands for an array with at least one element.
type nonEmpty struct{}

// jsonAt returns the value at path in doc: keys joined by dots, [i] for
// an array element, and "len" alone for the length of an array document.
func jsonAt(doc any, path string) (any, bool) {
	if path == "len" {
		l, ok := doc.([]any)
		return float64(len(l)), ok
	}
	cur := doc
	for _, part := range strings.Split(path, ".") {
		key, index, hasIndex := strings.Cut(part, "[")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[key]; !ok {
			return nil, false
		}
		if hasIndex {
			i, err := strconv.Atoi(strings.TrimSuffix(index, "]"))
			l, ok := cur.([]any)
			if err != nil || !ok || i >= len(l) {
				return nil, false
			}
			cur = l[i]
		}
	}
	return cur, true
}

// stdout that is not a terminal gets no escape codes although stderr is
// one ('labctl version > f'); --no-color removes them from stderr too.
func TestColorPerStreamAndNoColor(t *testing.T) {
	code, out, _ := runOn(t, terminal{out: false, err: true, color: true}, "", nil, "version")
	if code != 0 || strings.Contains(out, "\x1b[") {
		t.Errorf("version > file with stderr a terminal: exit %d, escapes in stdout %q", code, out)
	}
	code, out, _ = runOn(t, terminal{out: true, err: true, color: true}, "", nil, "version")
	if code != 0 || !strings.Contains(out, "\x1b[1mCOMPONENT") {
		t.Errorf("version on a terminal: exit %d, want a bold header: %q", code, out)
	}
	code, out, _ = runOn(t, terminal{out: true, err: true, color: true}, "", nil, "version", "--no-color")
	if code != 0 || strings.Contains(out, "\x1b") {
		t.Errorf("version --no-color on a terminal: exit %d, escapes %q", code, out)
	}
	lab := testLab(t)
	_, _, errOut := runOn(t, terminal{out: true, err: true, color: true}, "", nil, "config", "validate", "-c", lab, "--no-color")
	_, stdout, _ := runOn(t, terminal{out: true, err: true, color: true}, "", nil, "config", "validate", "-c", lab, "--no-color")
	if strings.Contains(errOut+stdout, "\x1b") {
		t.Errorf("config validate --no-color: escapes %q %q", stdout, errOut)
	}
}
