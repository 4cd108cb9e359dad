package config_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/config"
)

const (
	labExample   = "../../examples/lab.yaml"
	localExample = "../../examples/local-kvm.yaml"
)

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// wants returns the "# want: <substring>" lines of a testdata file.
func wants(data []byte) []string {
	var ws []string
	for _, line := range strings.Split(string(data), "\n") {
		if w, ok := strings.CutPrefix(line, "# want: "); ok {
			ws = append(ws, strings.TrimSpace(w))
		}
	}
	return ws
}

// errorList asserts err is a non-empty config.ErrorList whose entries all
// say something.
func errorList(t *testing.T, err error) config.ErrorList {
	t.Helper()
	var list config.ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("error is not a config.ErrorList: %T %v", err, err)
	}
	for _, e := range list {
		if e.Msg == "" {
			t.Errorf("error without a message: %+v", e)
		}
	}
	return list
}

// TestInvalidConfigs parses every testdata/invalid file: each has one thing
// broken, and the error must name it with the text in its "# want:" lines.
func TestInvalidConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 40 {
		t.Fatalf("want at least 40 broken configs in testdata/invalid, found %d", len(files))
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			data := readFile(t, path)
			ws := wants(data)
			if len(ws) == 0 || !strings.HasPrefix(strings.TrimPrefix(string(data), "\ufeff"), "# want: ") {
				t.Fatalf("%s must start with a '# want: <field path>' line", path)
			}
			lab, err := config.Parse("lab.yaml", data)
			if err == nil {
				t.Fatalf("Parse accepted a broken config; want an error containing %q", ws)
			}
			if lab != nil {
				t.Errorf("Parse returned a lab together with the error")
			}
			errorList(t, err)
			msg := err.Error()
			for _, w := range ws {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not contain %q:\n%s", w, msg)
				}
			}
			if !strings.HasPrefix(msg, "lab.yaml") && !strings.Contains(msg, "problems in lab config:\n  lab.yaml") {
				t.Errorf("error does not name the file lab.yaml:\n%s", msg)
			}
		})
	}
}

// TestInvalidConfigViaLoad checks what `config validate -c FILE` shows: the
// error names the file it read.
func TestInvalidConfigViaLoad(t *testing.T) {
	path := "testdata/invalid/cluster-workers-max-below-min.yaml"
	_, src, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true})
	if err == nil {
		t.Fatal("Load accepted a broken config")
	}
	if src.Name != path || src.BuiltIn {
		t.Errorf("source = %+v, want %s", src, path)
	}
	want := path + ":"
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "clusters[0].workers.max: must be >= workers.min (2), got 1") {
		t.Errorf("error = %q, want it to start with %q and name clusters[0].workers.max", err, want)
	}
}

// TestValidConfigs parses the examples and every testdata/valid file.
func TestValidConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Every example in the repository, the tenants' lab included.
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) < 4 {
		t.Fatalf("examples: %v %v", examples, err)
	}
	files = append(files, examples...)
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			lab, src, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if src.Name != path || src.BuiltIn {
				t.Errorf("source = %+v, want %s", src, path)
			}
			if lab.APIVersion != config.APIVersion || lab.Kind != config.Kind {
				t.Errorf("apiVersion/kind = %s/%s", lab.APIVersion, lab.Kind)
			}
		})
	}
}

// TestLabExample pins the owner's lab as LAB.md describes it.
func TestLabExample(t *testing.T) {
	lab, err := config.Parse("lab.yaml", readFile(t, labExample))
	if err != nil {
		t.Fatal(err)
	}
	h := lab.Hypervisors[0]
	if h.Proxmox == nil || h.Proxmox.URL != "https://192.168.0.8:8006" || h.Proxmox.Nodes[0].Name != "pv1-1" {
		t.Errorf("hypervisor = %+v, want Proxmox pv1-1 at 192.168.0.8", h)
	}
	if h.Proxmox.TokenSecret != (config.SecretRef{Env: "PVE_TOKEN_SECRET"}) {
		t.Errorf("tokenSecret = %+v", h.Proxmox.TokenSecret)
	}
	if n := lab.Network; n.VLAN != 4 || n.CIDR != "192.168.4.0/24" {
		t.Errorf("network = %+v, want VLAN 4 on 192.168.4.0/24", n)
	}
	if m := lab.Management; m.VMID != 201 || m.IP != "192.168.4.21" || m.Node != "pv1-1" {
		t.Errorf("management = %+v, want VM 201 at 192.168.4.21 on pv1-1", m)
	}
	c := lab.Clusters[0]
	if c.Name != "lab1" || c.ControlPlane.Endpoint == "" {
		t.Errorf("cluster = %+v, want lab1 with a VIP", c)
	}
	if len(c.Pools) != 1 || c.Pools[0].Name != config.DefaultPool || !slices.Equal(c.Pools[0].Hypervisors, []string{c.Hypervisor}) {
		t.Fatalf("pools = %+v, want workers as the one pool %s on %s", c.Pools, config.DefaultPool, c.Hypervisor)
	}
	if w := c.Pools[0]; w.Min != 0 || w.Max != 5 || w.Size.CPUs != 4 || w.Size.Memory != "2Gi" {
		t.Errorf("workers = %+v, want 4 vCPU / 2Gi scaling 0..5", w)
	}
	if c.MemoryAdjustment != 160 || c.PodCIDR != "10.244.0.0/16" {
		t.Errorf("memoryAdjustment = %d, podCIDR = %s", c.MemoryAdjustment, c.PodCIDR)
	}
	if c.KubernetesVersion != "v1.35.4" {
		t.Errorf("kubernetesVersion = %s, want the pinned v1.35.4", c.KubernetesVersion)
	}
	if w := lab.ScaleTest.Workload; w.CPU != "1500m" || w.Memory != "512Mi" {
		t.Errorf("inflate = %+v, want 1500m / 512Mi", w)
	}
}

// TestDefaults checks the defaults a minimal config gets.
func TestDefaults(t *testing.T) {
	lab, err := config.Parse("lab.yaml", readFile(t, "testdata/valid/proxmox-minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := lab.Management
	if m.Hypervisor != "pve" || m.Node != "pv1-1" || m.Name != config.DefaultMgmtName || m.User != config.DefaultUser {
		t.Errorf("management placement = %s/%s %s %s", m.Hypervisor, m.Node, m.Name, m.User)
	}
	if m.K3sVersion == "" || m.Image.URL == "" || m.Image.ChecksumURL == "" {
		t.Errorf("management image/k3s not defaulted: %+v", m)
	}
	c := lab.Clusters[0]
	if c.Template.Image != "kube" || c.ControlPlane.Replicas != 1 || c.Pools[0].Max != 3 || c.MemoryAdjustment != 100 {
		t.Errorf("cluster defaults = %+v", c)
	}
	if c.PodCIDR != config.DefaultPodCIDR || c.ServiceCIDR != config.DefaultServiceCIDR || c.CNI.Cilium == "" {
		t.Errorf("cluster networks = %s %s cilium %q", c.PodCIDR, c.ServiceCIDR, c.CNI.Cilium)
	}
	st := lab.ScaleTest
	if st.Workload.Image != config.DefaultInflateImage || st.Timeouts.ScaleUp == "" {
		t.Errorf("scaleTest = %+v", st)
	}

	// A cluster runs the Kubernetes version its template image was built for.
	lab, err = config.Parse("lab.yaml", readFile(t, "testdata/valid/two-nodes-two-clusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if v := lab.Clusters[0].KubernetesVersion; v != "v1.34.2" {
		t.Errorf("clusters[0].kubernetesVersion = %s, want v1.34.2 from its image", v)
	}

	// A libvirt image goes to every libvirt host, as the volume a
	// LibvirtMachineTemplate names.
	lab, err = config.Parse("lab.yaml", readFile(t, "testdata/valid/images-on-libvirt-hosts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	img := lab.Images[0]
	if !reflect.DeepEqual(img.Hosts, []string{"kvm1", "kvm2"}) || img.VolumeName() != "ubuntu-2404-kube-"+img.KubernetesVersion+".qcow2" {
		t.Errorf("libvirt image hosts %v, volume %s", img.Hosts, img.VolumeName())
	}
}

// TestEmbeddedExample checks that the built-in config is examples/local-kvm.yaml.
func TestEmbeddedExample(t *testing.T) {
	embedded, err := embedded.FS.ReadFile("examples/local-kvm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(embedded, readFile(t, localExample)) {
		t.Error("embedded/examples/local-kvm.yaml differs from examples/local-kvm.yaml")
	}
}

// TestRoundTrip is `config view | config validate -c -`: the defaulted
// config written out parses again to the same lab and the same bytes.
func TestRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/valid/*.yaml")
	for _, path := range append([]string{labExample, localExample}, files...) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			lab1, err := config.Parse("lab.yaml", readFile(t, path))
			if err != nil {
				t.Fatal(err)
			}
			out1, err := config.Marshal(lab1)
			if err != nil {
				t.Fatal(err)
			}
			lab2, _, err := config.Load(context.Background(), config.Request{Path: "-", Stdin: bytes.NewReader(out1)})
			if err != nil {
				t.Fatalf("the marshalled config does not load again: %v\n%s", err, out1)
			}
			if !reflect.DeepEqual(lab1, lab2) {
				t.Errorf("round trip changed the lab:\n%+v\n%+v", lab1, lab2)
			}
			out2, err := config.Marshal(lab2)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out1, out2) {
				t.Errorf("second round trip differs:\n%s\n---\n%s", out1, out2)
			}
		})
	}
}

// TestMarshalKeepsSecretsAsReferences checks that config view shows where
// the token secret is kept and nothing else.
func TestMarshalKeepsSecretsAsReferences(t *testing.T) {
	lab, err := config.Parse("lab.yaml", readFile(t, labExample))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PVE_TOKEN_SECRET", "7f3c2a9e-1b4d-4c8e-9a2f-5d6e7f8a9b0c")
	out, err := config.Marshal(lab)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "env: PVE_TOKEN_SECRET") || strings.Contains(string(out), "7f3c2a9e") {
		t.Errorf("tokenSecret is not written as a reference:\n%s", out)
	}
}

// TestAllErrorsAtOnce breaks several fields of one file: every problem is
// reported in one error, each with its line, in file order.
func TestAllErrorsAtOnce(t *testing.T) {
	data := string(readFile(t, labExample))
	for _, r := range [][2]string{
		{"  vlan: 4\n", "  vlan: 5000\n"},
		{"  vmid: 201\n", "  vmid: 50\n"},
		{"      min: 0\n      max: 5\n", "      min: 2\n      max: 1\n"},
		{"    podCIDR: 10.244.0.0/16", "    podCIDR: 192.168.0.0/16"},
		{"    memoryAdjustment: 160", "    memoryAdjustment: -5"},
	} {
		if strings.Count(data, r[0]) != 1 {
			t.Fatalf("%q is not in the example exactly once", r[0])
		}
		data = strings.Replace(data, r[0], r[1], 1)
	}
	lineOf := func(s string) int {
		for i, l := range strings.Split(data, "\n") {
			if strings.Contains(l, s) {
				return i + 1
			}
		}
		t.Fatalf("%q not found", s)
		return 0
	}
	want := []struct {
		field string
		line  int
		text  string
	}{
		{"network.vlan", lineOf("vlan: 5000"), "must be between 1 and 4094 (or 0 for untagged), got 5000"},
		{"management.vmid", lineOf("vmid: 50"), "must be between 100 and 999999999, got 50"},
		{"clusters[0].workers.max", lineOf("max: 1"), "must be >= workers.min (2), got 1"},
		{"clusters[0].podCIDR", lineOf("podCIDR:"), "192.168.0.0/16 overlaps the lab network 192.168.4.0/24"},
		{"clusters[0].memoryAdjustment", lineOf("memoryAdjustment:"), "must be a percentage between 1 and 1000"},
	}

	_, err := config.Parse("lab.yaml", []byte(data))
	if err == nil {
		t.Fatal("Parse accepted a broken config")
	}
	list := errorList(t, err)
	if len(list) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(list), len(want), err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, strconv.Itoa(len(want))+" problems in lab config:\n") {
		t.Errorf("error does not start with the count of problems:\n%s", msg)
	}
	lines := strings.Split(msg, "\n")[1:]
	for i, w := range want {
		e := list[i]
		if e.Field != w.field || e.Line != w.line || !strings.Contains(e.Msg, w.text) {
			t.Errorf("error %d = %s (line %d), want %s at line %d: %s", i, e, e.Line, w.field, w.line, w.text)
		}
		line := strings.TrimSpace(lines[i])
		wantPrefix := "lab.yaml:" + strconv.Itoa(w.line) + ": " + w.field + ": "
		if !strings.HasPrefix(line, wantPrefix) {
			t.Errorf("line %d of the error = %q, want it to start with %q", i+1, line, wantPrefix)
		}
	}
}

// TestDecodeErrorsAtOnce does the same for problems the strict decoder
// finds: unknown fields and wrong types.
func TestDecodeErrorsAtOnce(t *testing.T) {
	data := strings.Join([]string{
		"apiVersion: labctl.dev/v1alpha1", // 1
		"kind: Lab",                       // 2
		"metdata:",                        // 3
		"  name: x",                       // 4
		"network:",                        // 5
		"  vlan: four",                    // 6
		"management:",                     // 7
		"  size: {cpus: 2, memroy: 4Gi}",  // 8
		"",
	}, "\n")
	_, err := config.Parse("lab.yaml", []byte(data))
	list := errorList(t, err)
	// In file order, with what validation finds in the rest, without
	// repeating a field the typo left out; a field absent from the whole
	// file (hypervisors) last.
	want := []string{
		`lab.yaml:3: metdata: unknown field, did you mean "metadata"?`,
		`lab.yaml:6: network.vlan: must be a whole number, got "four"`,
		`lab.yaml:8: management.size.memroy: unknown field, did you mean "memory"?`,
		`lab.yaml:1: hypervisors: needs at least one hypervisor: a proxmox endpoint or a libvirt host`,
	}
	next := 0
	for _, e := range list {
		if next < len(want) && e.Error() == want[next] {
			next++
		}
	}
	if next < len(want) {
		t.Errorf("%q is missing or out of order:\n%v", want[next], err)
	}
	if last := list[len(list)-1].Error(); last != want[len(want)-1] {
		t.Errorf("last problem = %q, want the absent hypervisors list", last)
	}
	if strings.Contains(err.Error(), "metadata.name") {
		t.Errorf("metadata.name is reported missing beside the typo metdata that explains it:\n%v", err)
	}
}

// TestShapeAndMeaningAtOnce is the user's case from issue 14: one unknown
// field in an otherwise real lab must not hide a wrong value elsewhere.
func TestShapeAndMeaningAtOnce(t *testing.T) {
	data, err := os.ReadFile(labExample)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "\nnetwork:\n", "\nnetwork:\n  mtu: 9000\n", 1)
	text = strings.Replace(text, "podCIDR: 10.244.0.0/16", "podCIDR: 10.244.0.0/33", 1)
	if text == string(data) {
		t.Fatal("the example changed; adjust the edits")
	}
	_, err = config.Parse("lab.yaml", []byte(text))
	list := errorList(t, err)
	var fields []string
	for _, e := range list {
		fields = append(fields, e.Field)
	}
	if len(list) != 2 || list[0].Field != "network.mtu" || !strings.HasSuffix(list[1].Field, ".podCIDR") {
		t.Errorf("want the unknown field network.mtu and the bad podCIDR reported together, got fields %v:\n%v", fields, err)
	}
}

// TestSyntaxErrorLines checks that YAML syntax errors carry the line they
// are on, including the first.
func TestSyntaxErrorLines(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		line       int
	}{
		{"first line", "apiVersion: labctl.dev/v1alpha1: x\n", 1},
		{"unclosed flow list", "apiVersion: labctl.dev/v1alpha1\nkind: Lab\nnetwork:\n  dns: [1.1.1.1\nmanagement: {}\n", 4},
		{"unclosed flow map", "kind: Lab\nmetadata: {name: x\n", 2},
		{"bad indentation", "kind: Lab\nmetadata:\n  name: x\n    y: z\n", 4},
		{"unclosed quote", "kind: Lab\nmetadata:\n  name: \"x\n", 3},
		{"block entry in a map", "kind: Lab\nmetadata:\n  name: x\n- y\n", 4},
		{"unknown anchor", "kind: Lab\nmetadata:\n  name: *name\n", 3},
		{"second document", "kind: Lab\n---\nkind: Lab\n", 3},
		{"syntax error in second document", "kind: Lab\n---\nkind: [a\nb: c\n", 3},
		{"tab indentation", "kind: Lab\nmetadata:\n  name: x\n\t  foo: y\n", 4},
		{"character that cannot start a token", "kind: Lab\n@foo: 1\n", 2},
		{"duplicate key", "kind: Lab\nkind: Lab\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("lab.yaml", []byte(tc.data))
			list := errorList(t, err)
			if list[0].Line != tc.line {
				t.Errorf("line = %d, want %d: %v", list[0].Line, tc.line, err)
			}
			if want := "lab.yaml:" + strconv.Itoa(tc.line) + ": "; !strings.HasPrefix(list[0].Error(), want) {
				t.Errorf("first error = %q, want it to start with %q", list[0], want)
			}
		})
	}
}

// TestNotALab covers inputs that are no lab document at all.
func TestNotALab(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "lab.yaml: the config is empty (0 bytes, no YAML); run 'labctl config init --force -c lab.yaml'"},
		{"blank", " \n\t\n", "the config is empty"},
		{"only comments", "# nothing here\n", "has no YAML document"},
		{"scalar", "lab\n", "lab.yaml:1: must be a mapping of fields"},
		{"list", "- apiVersion: labctl.dev/v1alpha1\n", "lab.yaml:1: must be a mapping of fields, got a list"},
		{"null document", "~\n", "apiVersion: must be labctl.dev/v1alpha1"},
		{"kubernetes object", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata: {}\n", "lab.yaml:5: data: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab, err := config.Parse("lab.yaml", []byte(tc.data))
			if err == nil || lab != nil {
				t.Fatalf("Parse(%q) = %v, %v; want an error", tc.data, lab, err)
			}
			errorList(t, err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestLoadBuiltInFallback: without a named config and without ./lab.yaml,
// labctl uses the embedded local-kvm example and says so.
func TestLoadBuiltInFallback(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, req := range []config.Request{
		{},                                 // nothing named: ./lab.yaml
		{Path: config.DefaultPath},         // the flag's default
		{Path: "missing.yaml"},             // not named by the user
		{Path: "missing.yaml", Stdin: nil}, // same, with no stdin
	} {
		lab, src, err := config.Load(context.Background(), req)
		if err != nil {
			t.Fatalf("Load(%+v): %v", req, err)
		}
		if !src.BuiltIn || !strings.Contains(src.Name, "built-in") || !strings.Contains(src.String(), "local-kvm") {
			t.Errorf("Load(%+v) source = %+v, want the built-in local-kvm example", req, src)
		}
		if lab.Metadata.Name != "local" || lab.Hypervisors[0].Libvirt == nil || lab.Hypervisors[0].Libvirt.URI != "qemu:///system" {
			t.Errorf("built-in lab = %+v", lab)
		}
	}

	// A ./lab.yaml that exists is used, also when it is broken.
	if err := os.WriteFile("lab.yaml", []byte("kind: Lab\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, src, err := config.Load(context.Background(), config.Request{})
	if err == nil || src.BuiltIn || !strings.Contains(err.Error(), config.DefaultPath+":1: apiVersion: must be labctl.dev/v1alpha1") {
		t.Errorf("Load with a broken ./lab.yaml = %+v, %v; want its errors, not the built-in lab", src, err)
	}
}

// TestLoadExplicitMissing: a config the user named must exist.
func TestLoadExplicitMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	lab, src, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true})
	if err == nil || lab != nil {
		t.Fatalf("Load of a missing explicit config = %v, %v; want an error", lab, err)
	}
	if src.BuiltIn {
		t.Error("fell back to the built-in example for an explicit path")
	}
	for _, want := range []string{path, "does not exist", "labctl config init -c " + path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// TestLoadStdin covers -c -.
func TestLoadStdin(t *testing.T) {
	lab, src, err := config.Load(context.Background(), config.Request{Path: "-", Explicit: true, Stdin: bytes.NewReader(readFile(t, labExample))})
	if err != nil {
		t.Fatal(err)
	}
	if src.Name != "stdin" || src.BuiltIn || lab.Metadata.Name != "home" {
		t.Errorf("source = %+v, lab = %s", src, lab.Metadata.Name)
	}

	broken := readFile(t, "testdata/invalid/network-vlan-5000.yaml")
	_, _, err = config.Load(context.Background(), config.Request{Path: "-", Stdin: bytes.NewReader(broken)})
	if err == nil || !regexp.MustCompile(`^stdin:\d+: network\.vlan: `).MatchString(err.Error()) {
		t.Errorf("error = %v, want stdin:<line>: network.vlan: ...", err)
	}

	_, _, err = config.Load(context.Background(), config.Request{Path: "-", Stdin: strings.NewReader("")})
	if err == nil || !strings.Contains(err.Error(), "stdin: the config is empty") {
		t.Errorf("empty stdin: error = %v", err)
	}

	_, _, err = config.Load(context.Background(), config.Request{Path: "-"})
	if err == nil || !strings.Contains(err.Error(), "stdin") {
		t.Errorf("no stdin: error = %v", err)
	}

	_, _, err = config.Load(context.Background(), config.Request{Path: "-", Stdin: failingReader{}})
	if err == nil || !strings.Contains(err.Error(), "reading lab config from stdin") {
		t.Errorf("failing stdin: error = %v", err)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestLoadUnreadable: a path that exists but is no file is an error, never
// a silent fall back.
func TestLoadUnreadable(t *testing.T) {
	dir := t.TempDir()
	_, src, err := config.Load(context.Background(), config.Request{Path: dir})
	if err == nil || src.BuiltIn || !strings.Contains(err.Error(), "reading lab config") {
		t.Errorf("Load(directory) = %+v, %v", src, err)
	}
}

// TestValidateReportsFieldPaths runs Validate on a lab built in Go, as
// other packages may: errors carry field paths but no file.
func TestValidateReportsFieldPaths(t *testing.T) {
	lab, err := config.Parse("lab.yaml", readFile(t, labExample))
	if err != nil {
		t.Fatal(err)
	}
	lab.Clusters[0].Pools[0].Min, lab.Clusters[0].Pools[0].Max = 2, 1
	errs := config.Validate(lab)
	if len(errs) != 1 || errs[0].Error() != "clusters[0].workers.max: must be >= workers.min (2), got 1" {
		t.Errorf("Validate = %v", errs)
	}
}

// TestInvalidWantLines is a sanity check on the testdata: a ":N:" want names a line
// that exists in the file.
func TestInvalidWantLines(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	re := regexp.MustCompile(`^:(\d+):`)
	for _, path := range files {
		data := readFile(t, path)
		n := strings.Count(string(data), "\n")
		for _, w := range wants(data) {
			if m := re.FindStringSubmatch(w); m != nil {
				if l, _ := strconv.Atoi(m[1]); l < 1 || l > n {
					t.Errorf("%s: want line %d is outside the file (%d lines)", path, l, n)
				}
			}
		}
	}
}

// TestNewcomerValidation is issue 24's validation walk: each edit of an
// example gives the message a newcomer needs, or passes where it must.
func TestNewcomerValidation(t *testing.T) {
	lab := string(readFile(t, labExample))
	mixed := string(readFile(t, "../../examples/lab-mixed.yaml"))
	edit := func(data, old, new string) string {
		t.Helper()
		if strings.Count(data, old) != 1 {
			t.Fatalf("%q is not in the example exactly once", old)
		}
		return strings.Replace(data, old, new, 1)
	}
	for _, tc := range []struct {
		name, data, want, not string
	}{
		{"memory past int64", edit(lab, "memory: 2Gi # lab1-worker-2g", "memory: 1e19 #"), "1e19 is too large: a VM gets at most 64Ti", "too little"},
		{"memory in exbibytes", edit(lab, "memory: 2Gi # lab1-worker-2g", "memory: 100Ei #"), "100Ei is too large: a VM gets at most 64Ti", ""},
		{"memory past any host", edit(lab, "memory: 2Gi # lab1-worker-2g", "memory: 1Ei #"), "workers.size.memory: 1Ei is too large: a VM gets at most 64Ti", ""},
		{"memory just past the bound", edit(lab, "memory: 2Gi # lab1-worker-2g", "memory: 65Ti #"), "65Ti is too large", ""},
		{"a count past any integer", edit(lab, "      max: 5\n", "      max: 99999999999999999999\n"), "max: 99999999999999999999 is too large", "whole number"},
		{"a tab", "kind: Lab\nmetadata:\n\tname: x\n", "line 3 starts with a tab; YAML indents with spaces only", ""},
		{"a tab before a top-level key", "kind: Lab\nmetadata:\n  name: x\n\tnetwork: {}\n", "lab.yaml:4: YAML syntax error: line 4 starts with a tab; YAML indents with spaces only", "violates"},
		{"tabs deeper in", "kind: Lab\nmetadata:\n  name: x\nnetwork:\n  cidr: 10.0.0.0/24\n\t\tgateway: 10.0.0.1\n", "lab.yaml:6: YAML syntax error: line 6 starts with a tab", "violates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("lab.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.not != "" && strings.Contains(err.Error(), tc.not)) {
				t.Errorf("error %v; want %q, not %q", err, tc.want, tc.not)
			}
		})
	}
	// The bound itself is a size some host could give.
	if _, err := config.Parse("lab.yaml", []byte(edit(lab, "memory: 2Gi # lab1-worker-2g", "memory: 64Ti #"))); err != nil {
		t.Errorf("memory: 64Ti is refused: %v", err)
	}
	// keyfile is libvirt's own URI parameter, and its value a path.
	keyfile := edit(mixed, "uri: qemu+ssh://root@kvm1.lan/system", "uri: qemu+ssh://root@kvm1.lan/system?keyfile=/home/u/.ssh/id_ed25519&known_hosts=/home/u/.ssh/known_hosts&sshauth=privkey")
	if _, err := config.Parse("lab.yaml", []byte(keyfile)); err != nil {
		t.Errorf("a libvirt URI with keyfile= is refused: %v", err)
	}
	// A password in the same URL still is a credential.
	pw := edit(mixed, "uri: qemu+ssh://root@kvm1.lan/system", "uri: qemu+ssh://root:hunter2@kvm1.lan/system?keyfile=/k")
	if _, err := config.Parse("lab.yaml", []byte(pw)); err == nil || !strings.Contains(err.Error(), "holds credentials") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a password in a libvirt URI: %v", err)
	}
}

// TestProblemsInFileOrder: what validation finds and what the decoder
// finds are listed together in file order, as docs/config.md says; only a
// field missing from the file entirely comes last.
func TestProblemsInFileOrder(t *testing.T) {
	data := strings.Join([]string{
		"apiVersion: labctl.dev/v1alpha1", // 1
		"kind: Lab",                       // 2
		"metadata:",                       // 3
		"  name: x",                       // 4
		"network:",                        // 5
		"  vlan: 5000",                    // 6: validation
		"management:",                     // 7
		"  size: {cpus: 2, memroy: 4Gi}",  // 8: shape
		"",
	}, "\n")
	_, err := config.Parse("lab.yaml", []byte(data))
	list := errorList(t, err)
	at := map[string]int{}
	for i, e := range list {
		at[e.Field] = i
		// Only the hypervisors list, absent from the file, has no line of
		// its own; everything before it is in line order.
		if e.Field == "hypervisors" {
			if i != len(list)-1 {
				t.Errorf("hypervisors (not in the file) is problem %d of %d, want it last", i+1, len(list))
			}
		} else if i > 0 && e.Line < list[i-1].Line {
			t.Errorf("problem %d (line %d) comes after one on line %d", i+1, e.Line, list[i-1].Line)
		}
	}
	if !(at["network.vlan"] < at["management.size.memroy"]) {
		t.Errorf("the bad vlan (line 6) is listed after the typo on line 8:\n%v", err)
	}
}
