package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stubGo is a go command that compiles nothing: `go build` records its
// folder and arguments and writes each output file with the require lines
// of the go.mod where it runs, which `go version -m` then prints, as the
// real build info lists a binary's modules.
const stubGo = `#!/usr/bin/env bash
set -e
if [ "$1" = version ]; then cat "$3"; exit 0; fi
[ "$1" = build ] || exit 0
shift
echo "$PWD $*" >>"$STUB_LOG"
o= pkgs=()
while [ $# -gt 0 ]; do
  case $1 in
  -o) o=$2; shift 2 ;;
  -tags|-ldflags) shift 2 ;;
  -*) shift ;;
  *) pkgs+=("$1"); shift ;;
  esac
done
info=$(awk '/^require|^\t/ && NF >= 2 && $1 !~ /^(require|replace|tool|\/\/)/ { printf "\tdep\t%s\t%s\n", $1, $2 }' go.mod 2>/dev/null || true)
if [[ $o != */ ]]; then echo "$info" >"$o"; chmod +x "$o"; exit 0; fi
for p in "${pkgs[@]}"; do
  b=${p##*/}
  if [[ $b =~ ^v[0-9]+$ ]]; then q=${p%/*}; b=${q##*/}; fi
  if [ -e "$o$b" ]; then echo "stub: two packages named $b" >&2; exit 1; fi
  echo "$info" >"$o$b"; chmod +x "$o$b"
done
`

func TestTestenvOneBuildPerGraphThenWarm(t *testing.T) {
	u := newUpstream(t)
	commit := u.commit("main.go", "package main\n")
	dir := t.TempDir()
	stub := filepath.Join(dir, "stub")
	if err := os.MkdirAll(stub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stub, "go"), []byte(stubGo), 0o755); err != nil {
		t.Fatal(err)
	}
	pins := filepath.Join(dir, "sources")
	if err := os.WriteFile(pins, []byte("cluster-autoscaler-1.35.0 "+u.url()+" - "+commit+" .\nkamaji-e51909f "+u.url()+" - "+commit+" .\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, log := filepath.Join(dir, "bin"), filepath.Join(dir, "builds")
	run := func() (builds []string, stderr string) {
		t.Helper()
		os.Remove(log)
		cmd := exec.Command("./testenv.sh", "controllers", "envtest")
		cmd.Env = append(os.Environ(), "PATH="+stub+":"+os.Getenv("PATH"), "STUB_LOG="+log, "TESTBED_BIN="+bin,
			"TESTBED_SOURCES="+pins, "TESTBED_SRC="+filepath.Join(dir, "src"), "LABCTL_SHARED="+filepath.Join(dir, "none"),
			"GIT_CONFIG_GLOBAL=/dev/null", "CI=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("testenv.sh: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(log)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				builds = append(builds, l)
			}
		}
		return builds, string(out)
	}

	builds, out := run()
	// Each go build, by the packages it was given.
	var got []string
	for _, b := range builds {
		var pkgs []string
		for _, f := range strings.Fields(b) {
			if strings.Contains(f, ".") && !strings.HasPrefix(f, "/") && !strings.HasPrefix(f, "-") && !strings.Contains(f, "=") || f == "." {
				pkgs = append(pkgs, f)
			}
		}
		got = append(got, strings.Join(pkgs, " "))
	}
	want := []string{
		"k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl",
		// The release before the pin, in its own graph, for the upgrade tests.
		"k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler",
		"sigs.k8s.io/cluster-api sigs.k8s.io/cluster-api/bootstrap/kubeadm",
		"sigs.k8s.io/cluster-api/controlplane/kubeadm",
		"github.com/ionos-cloud/cluster-api-provider-proxmox/cmd",
		"sigs.k8s.io/cluster-api-operator/cmd",
		"sigs.k8s.io/cluster-api-ipam-provider-in-cluster",
		"sigs.k8s.io/kwok/cmd/kwok",
		".", // cluster-autoscaler, in its source
		".", // Kamaji, in its source
		"github.com/clastix/cluster-api-control-plane-provider-kamaji",
		"go.etcd.io/etcd/server/v3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("go builds:\n  %s\nwant:\n  %s\n%s", strings.Join(got, "\n  "), strings.Join(want, "\n  "), out)
	}
	if !strings.Contains(builds[len(builds)-4], filepath.Join(dir, "src", "cluster-autoscaler-1.35.0")+" ") {
		t.Errorf("the autoscaler was not built in its fetched source: %s", builds[len(builds)-4])
	}
	if !strings.Contains(builds[len(builds)-3], filepath.Join(dir, "src", "kamaji-e51909f")+" ") {
		t.Errorf("Kamaji was not built in its fetched source: %s", builds[len(builds)-3])
	}
	names := []string{"etcd", "kube-apiserver", "kubectl", "kube-controller-manager", "kube-scheduler", "cluster-api",
		"kubeadm-bootstrap", "kubeadm-control-plane", "capmox", "ipam-in-cluster", "cluster-api-operator", "kwok", "cluster-autoscaler", "kamaji", "kamaji-provider",
		"kube-apiserver-v1.35.3", "kube-controller-manager-v1.35.3", "kube-scheduler-v1.35.3"}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
			t.Errorf("%s not built: %v", n, err)
		}
	}

	// Warm: nothing is built.
	if builds, out := run(); len(builds) != 0 {
		t.Errorf("the warm run built %v\n%s", builds, out)
	} else {
		for _, n := range names {
			if !strings.Contains(out, "testbed: "+n+" present") {
				t.Errorf("the warm run does not report %s present:\n%s", n, out)
			}
		}
	}

	// A binary gone, and one built from other pins (its stamp differs):
	// each rebuilt alone.
	if err := os.Remove(filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, ".capmox.stamp"), []byte("another graph\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	builds, out = run()
	slices.Sort(builds)
	if len(builds) != 2 || !strings.HasSuffix(builds[0], " k8s.io/kubernetes/cmd/kubectl") ||
		!strings.HasSuffix(builds[1], " github.com/ionos-cloud/cluster-api-provider-proxmox/cmd") {
		t.Errorf("after removing kubectl and changing capmox's stamp, go builds: %q\n%s", builds, out)
	}
}
