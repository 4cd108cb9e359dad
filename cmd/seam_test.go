package cmd

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/access"
	"github.com/labctl/labctl/internal/backup"
	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/configfile"
	"github.com/labctl/labctl/internal/doctor"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/imagebuild"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/labstatus"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/scaletest"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versioninfo"
)

// cmdCase is one command line: the options its run is handed, or the
// usage error (exit 2) it is refused with.
type cmdCase[O any] struct {
	args []string // after the command's path
	want *O       // nil for a refusal
	err  string
}

// testCommandLine runs each case's command line through the whole
// command tree, with the command at path made by newCmd over a runF that
// keeps what it is handed: the seam of seam.go. The factory fails the
// test if anything loads the lab or reaches a hypervisor or a cluster, so
// every case runs in milliseconds with neither.
func testCommandLine[O any](t *testing.T, path string, newCmd func(*cmdutil.Factory, runFunc[O]) *cobra.Command, cases []cmdCase[O]) {
	t.Helper()
	for _, tc := range cases {
		args := append(strings.Fields(path), tc.args...)
		line := "labctl " + strings.Join(args, " ")
		code, got, stderr := parseWith(t, newCmd, args)
		switch {
		case tc.want == nil && (code != exitUsage || got != nil || !strings.Contains(stderr, "Error: "+tc.err)):
			t.Errorf("%s: exit %d, run called %v, stderr %q; want exit 2 and %q", line, code, got != nil, stderr, tc.err)
		case tc.want != nil && code != exitOK:
			t.Errorf("%s: exit %d, stderr %q; want the run called", line, code, stderr)
		case tc.want != nil && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: the run got\n  %+v\nwant\n  %+v", line, got, tc.want)
		}
	}
}

// parseWith runs args with the command they name made by newCmd; it
// returns the exit code, the options the run got (nil when not called)
// and stderr.
func parseWith[O any](t *testing.T, newCmd func(*cmdutil.Factory, runFunc[O]) *cobra.Command, args []string) (int, *O, string) {
	t.Helper()
	io, _, _, errb := ui.Test()
	f := unreachableFactory(t, io)
	var got *O
	c := newCmd(f, func(_ context.Context, o *O) error {
		got = o
		return nil
	})
	root := NewRoot(f)
	old, _, err := root.Find(args)
	if err != nil || old.Name() != c.Name() {
		t.Fatalf("labctl %s does not name %s: %v", strings.Join(args, " "), c.Name(), err)
	}
	parent := old.Parent()
	parent.RemoveCommand(old)
	parent.AddCommand(c)
	usageErrors(c)
	code := execute(t.Context(), io, root, args)
	return code, got, errb.String()
}

// unreachableFactory is a factory whose lab, hypervisors and clusters
// fail the test when reached.
func unreachableFactory(t *testing.T, io *ui.IO) *cmdutil.Factory {
	f := cmdutil.New(io, &cmdutil.Settings{})
	errNone := errors.New("nothing to reach in this test")
	f.Lab = func(context.Context) (*config.Lab, config.Source, error) {
		t.Error("the command line alone loaded the lab")
		return nil, config.Source{}, errNone
	}
	f.Driver = func(context.Context, string) (hypervisor.Driver, error) {
		t.Error("the command line alone opened a hypervisor")
		return nil, errNone
	}
	f.Connect = func(string) (*kube.Client, error) {
		t.Error("the command line alone connected to a cluster")
		return nil, errNone
	}
	f.Mgmt = func(context.Context) (*kube.Client, error) {
		t.Error("the command line alone reached the management cluster")
		return nil, errNone
	}
	f.OwnMgmt = f.Mgmt
	f.Workload = func(context.Context, string) (*rest.Config, error) {
		t.Error("the command line alone reached a workload cluster")
		return nil, errNone
	}
	return f
}

func intp(n int) *int { return &n }

func TestClusterScaleCommandLine(t *testing.T) {
	scale := func(pool string, minW, maxW, replicas *int) cluster.ScaleOptions {
		return cluster.ScaleOptions{Pool: pool, Min: minW, Max: maxW, Replicas: replicas}
	}
	testCommandLine(t, "cluster scale", newClusterScaleCmd, []cmdCase[clusterScaleOptions]{
		{args: []string{"lab1", "--min", "0", "--max", "5"}, want: &clusterScaleOptions{clusterArgs: clusterArgs{Name: "lab1"}, Scale: scale("workers", intp(0), intp(5), nil)}},
		{args: []string{"lab1", "--max", "8", "--dry-run"}, want: &clusterScaleOptions{clusterArgs: clusterArgs{Name: "lab1", DryRun: true}, Scale: scale("workers", nil, intp(8), nil)}},
		{args: []string{"lab1", "--pool", "kvm", "--replicas", "0"}, want: &clusterScaleOptions{clusterArgs: clusterArgs{Name: "lab1"}, Scale: scale("kvm", nil, nil, intp(0))}},
		{args: []string{"lab1"}, err: "give --min and --max (an autoscaled pool) or --replicas (a fixed pool)"},
		{args: []string{"lab1", "--min", "3", "--max", "1"}, err: "--max 1: must be >= --min (3), got 1"},
		{args: []string{"lab1", "--replicas", "2", "--min", "1"}, err: "--replicas sets a fixed pool's count and --min/--max an autoscaled pool's bounds; pass one kind"},
		{args: []string{"lab1", "--max", "0"}, err: "--max 0: must be at least 1"},
		{args: []string{"lab1", "--max", "many"}, err: `invalid argument "many" for "--max" flag`},
		{args: []string{"--max", "3"}, err: "accepts 1 arg(s), received 0"},
	})
}

func TestClusterCreateCommandLine(t *testing.T) {
	testCommandLine(t, "cluster create", newClusterCreateCmd, []cmdCase[clusterCreateOptions]{
		{args: []string{"lab1"}, want: &clusterCreateOptions{clusterArgs: clusterArgs{Name: "lab1"}}},
		{args: []string{"lab1", "--dry-run"}, want: &clusterCreateOptions{clusterArgs: clusterArgs{Name: "lab1", DryRun: true}}},
		{args: []string{"lab1", "--dry-run", "-o", "json"}, want: &clusterCreateOptions{clusterArgs: clusterArgs{Name: "lab1", DryRun: true}, Output: "json"}},
		{args: []string{"lab1", "-o", "yaml"}, err: "-o yaml/json prints the objects; use it with --dry-run"},
		{args: []string{"lab1", "--dry-run", "-o", "text"}, err: `--output "text": must be one of yaml, json`},
		{args: []string{"lab1", "lab2"}, err: "accepts 1 arg(s), received 2"},
	})
}

func TestClusterDeleteAndUpgradeCommandLines(t *testing.T) {
	testCommandLine(t, "cluster delete", newClusterDeleteCmd, []cmdCase[clusterDeleteOptions]{
		{args: []string{"lab1"}, want: &clusterDeleteOptions{clusterArgs: clusterArgs{Name: "lab1"}}},
		{args: []string{"lab1", "--yes", "--dry-run"}, want: &clusterDeleteOptions{clusterArgs: clusterArgs{Name: "lab1", DryRun: true}, Yes: true}},
		{args: []string{}, err: "accepts 1 arg(s), received 0"},
	})
	upgrade := func(to string, timeout time.Duration, yes bool) cluster.UpgradeOptions {
		u := cluster.UpgradeOptions{To: to, Yes: yes}
		u.Timeout = timeout
		return u
	}
	testCommandLine(t, "cluster upgrade", newClusterUpgradeCmd, []cmdCase[clusterUpgradeOptions]{
		{args: []string{"lab1"}, want: &clusterUpgradeOptions{clusterArgs: clusterArgs{Name: "lab1"}, Upgrade: upgrade("", cluster.DefaultTimeout, false)}},
		{args: []string{"lab1", "--to", "v1.35.4", "--yes", "--timeout", "40m", "--dry-run"},
			want: &clusterUpgradeOptions{clusterArgs: clusterArgs{Name: "lab1", DryRun: true}, Upgrade: upgrade("v1.35.4", 40*time.Minute, true)}},
		{args: []string{"lab1", "--timeout", "0s"}, err: "--timeout 0s: must be more than 0, e.g. 30m"},
		{args: []string{"lab1", "--to", "1.35"}, err: "--to: "},
	})
}

func TestKubeconfigCommandLines(t *testing.T) {
	ttl := access.DefaultTTL
	testCommandLine(t, "cluster kubeconfig", newClusterKubeconfigCmd, []cmdCase[kubeconfigOptions]{
		{args: []string{"lab1"}, want: &kubeconfigOptions{Name: "lab1", ReadOnly: readOnlyFlags{ttl: ttl}}},
		{args: []string{"lab1", "--write", "k", "--force"}, want: &kubeconfigOptions{Name: "lab1", Export: kube.ExportOptions{Write: "k", Force: true}, ReadOnly: readOnlyFlags{ttl: ttl}}},
		// --file is --write's old name.
		{args: []string{"lab1", "--file", "k"}, want: &kubeconfigOptions{Name: "lab1", Export: kube.ExportOptions{Write: "k"}, ReadOnly: readOnlyFlags{ttl: ttl}}},
		{args: []string{"lab1", "--read-only", "--ttl", "8h", "--merge"}, want: &kubeconfigOptions{Name: "lab1", Export: kube.ExportOptions{Merge: true}, ReadOnly: readOnlyFlags{readOnly: true, ttl: 8 * time.Hour}}},
		{args: []string{"lab1", "--revoke", "--dry-run"}, want: &kubeconfigOptions{Name: "lab1", ReadOnly: readOnlyFlags{revoke: true, dryRun: true, ttl: ttl}}},
		{args: []string{"lab1", "--dry-run"}, err: "--dry-run needs --read-only (or --revoke)"},
		{args: []string{"lab1", "--read-only", "--ttl", "5m"}, err: "--ttl 5m0s: the API server issues no token for less than 10m0s"},
	})
	testCommandLine(t, "mgmt kubeconfig", newMgmtKubeconfigCmd, []cmdCase[kubeconfigOptions]{
		{args: []string{"--merge"}, want: &kubeconfigOptions{Export: kube.ExportOptions{Merge: true}, ReadOnly: readOnlyFlags{ttl: ttl}}},
		{args: []string{"--read-only", "--write", "v"}, want: &kubeconfigOptions{Export: kube.ExportOptions{Write: "v"}, ReadOnly: readOnlyFlags{readOnly: true, ttl: ttl}}},
		{args: []string{"--write", "x", "--merge"}, err: "--write and --merge cannot be used together; pass only one"},
		{args: []string{"--ttl", "2h"}, err: "--ttl needs --read-only (or --revoke)"},
		{args: []string{"--read-only", "--revoke"}, err: "--read-only makes a token and --revoke ends them all; pass one"},
		{args: []string{"lab1"}, err: `unknown command "lab1" for "labctl mgmt kubeconfig"`},
	})
}

func TestMgmtInstallAndUpgradeCommandLines(t *testing.T) {
	testCommandLine(t, "mgmt install", newMgmtInstallCmd, []cmdCase[mgmt.InstallOptions]{
		{args: nil, want: &mgmt.InstallOptions{Output: "text", Charts: mgmt.Auto, Timeout: mgmt.DefaultTimeout}},
		{args: []string{"--dry-run", "-o", "yaml", "--charts", "helm-sdk", "--timeout", "20m", "--wait=false", "--offline-dir", "/srv/off"},
			want: &mgmt.InstallOptions{DryRun: true, Output: "yaml", Charts: mgmt.HelmSDK, Timeout: 20 * time.Minute, NoWait: true, OfflineDir: "/srv/off"}},
		{args: []string{"--emit-k3s-manifests", "out"}, want: &mgmt.InstallOptions{Output: "text", Charts: mgmt.Auto, Timeout: mgmt.DefaultTimeout, EmitK3sManifests: "out"}},
		{args: []string{"--charts", "flux"}, err: `--charts "flux": must be one of auto, helm-controller, helm-sdk`},
		{args: []string{"--timeout", "0s"}, err: "--timeout 0s: must be more than 0"},
		{args: []string{"-o", "json"}, err: "-o json prints the objects of a dry run; add --dry-run"},
		{args: []string{"-o", "toml", "--dry-run"}, err: `--output "toml": must be one of text, json, yaml`},
	})
	testCommandLine(t, "mgmt upgrade", newMgmtUpgradeCmd, []cmdCase[mgmt.UpgradeOptions]{
		{args: nil, want: &mgmt.UpgradeOptions{Charts: mgmt.Auto, Timeout: mgmt.DefaultTimeout}},
		{args: []string{"--yes", "--dry-run", "--charts", "helm-controller", "--offline-dir", "d"},
			want: &mgmt.UpgradeOptions{Yes: true, DryRun: true, Charts: mgmt.HelmController, Timeout: mgmt.DefaultTimeout, OfflineDir: "d"}},
		{args: []string{"--charts", "kubectl"}, err: `--charts "kubectl": must be one of auto, helm-controller, helm-sdk`},
	})
}

func TestMgmtDownCommandLine(t *testing.T) {
	testCommandLine(t, "mgmt down", newMgmtDownCmd, []cmdCase[mgmt.DownOptions]{
		{args: nil, want: &mgmt.DownOptions{Timeout: cluster.DefaultTimeout}},
		{args: []string{"--cascade", "--yes", "--timeout", "1h"}, want: &mgmt.DownOptions{Cascade: true, Yes: true, Timeout: time.Hour}},
		// --delete-clusters is --cascade's old name.
		{args: []string{"--delete-clusters", "--dry-run"}, want: &mgmt.DownOptions{Cascade: true, DryRun: true, Timeout: cluster.DefaultTimeout}},
		{args: []string{"--skip-cluster-check"}, want: &mgmt.DownOptions{SkipClusterCheck: true, Timeout: cluster.DefaultTimeout}},
		{args: []string{"--timeout", "soon"}, err: `invalid argument "soon" for "--timeout" flag`},
	})
}

func TestMgmtBackupAndRestoreCommandLines(t *testing.T) {
	testCommandLine(t, "mgmt backup", newMgmtBackupCmd, []cmdCase[backup.Options]{
		{args: []string{"lab.age"}, want: &backup.Options{File: "lab.age"}},
		{args: []string{"--dry-run"}, want: &backup.Options{DryRun: true}},
		{args: []string{"--skip-tenants", "lab.age"}, want: &backup.Options{File: "lab.age", SkipTenants: true}},
		{args: nil, err: "FILE is missing: 'labctl mgmt backup FILE' (or --dry-run"},
		{args: []string{"a", "b"}, err: "accepts at most 1 arg(s), received 2"},
	})
	testCommandLine(t, "mgmt restore", newMgmtRestoreCmd, []cmdCase[backup.RestoreOptions]{
		{args: []string{"lab.age"}, want: &backup.RestoreOptions{File: "lab.age", AdoptTimeout: backup.DefaultAdoptTimeout}},
		{args: []string{"--dry-run", "lab.age", "--timeout", "5m"}, want: &backup.RestoreOptions{File: "lab.age", DryRun: true, AdoptTimeout: 5 * time.Minute}},
		{args: nil, err: "accepts 1 arg(s), received 0"},
	})
}

func TestScaleTestCommandLine(t *testing.T) {
	testCommandLine(t, "scale-test", newScaleTestCmd, []cmdCase[scaletest.CommandOptions]{
		{args: []string{"lab1"}, want: &scaletest.CommandOptions{Cluster: "lab1", Scenario: "all", Output: "text"}},
		{args: []string{"lab1", "--scenario", "from-zero", "-o", "json", "--chart", "lab1.png", "--dry-run"},
			want: &scaletest.CommandOptions{Cluster: "lab1", Scenario: "from-zero", Output: "json", Chart: "lab1.png", DryRun: true}},
		{args: []string{"lab1", "--scenario", "sideways"}, err: `--scenario "sideways": must be one of up, down, from-zero, all`},
		{args: []string{"lab1", "--chart", "x.jpg"}, err: `--chart "x.jpg": the file must end in .svg or .png`},
		{args: []string{"lab1", "-o", "xml"}, err: `--output "xml": must be one of text, json, yaml`},
	})
}

func TestConfigInitCommandLine(t *testing.T) {
	testCommandLine(t, "config init", newConfigInitCmd, []cmdCase[configfile.InitOptions]{
		{args: nil, want: &configfile.InitOptions{Path: "./lab.yaml"}},
		{args: []string{"-c", "-", "--local"}, want: &configfile.InitOptions{Path: "-", Local: true}},
		{args: []string{"--proxmox", "https://pve1.lan:8006", "--force", "--dry-run", "-c", "lab/lab.yaml"},
			want: &configfile.InitOptions{Path: "lab/lab.yaml", Proxmox: "https://pve1.lan:8006", Force: true, DryRun: true}},
		{args: []string{"--local", "--proxmox", "https://pve1.lan:8006"}, err: "--local and --proxmox cannot be used together; pass only one"},
		{args: []string{"--proxmox", "not a url"}, err: `--proxmox "not a url": want the Proxmox VE API URL`},
	})
}

// outputCases are the cases of -o on a command that prints data (addOutputFlag):
// text by default, json and yaml when asked, and nothing else. withOutput is
// the options the command's run gets for an -o and no other flag.
func outputCases[O any](withOutput func(out string) *O) []cmdCase[O] {
	return []cmdCase[O]{
		{args: nil, want: withOutput("text")},
		{args: []string{"-o", "json"}, want: withOutput("json")},
		{args: []string{"--output", "yaml"}, want: withOutput("yaml")},
		{args: []string{"-o", "wide"}, err: `--output "wide": must be one of text, json, yaml`},
	}
}

func TestMgmtUpAndStatusCommandLines(t *testing.T) {
	testCommandLine(t, "mgmt up", newMgmtUpCmd, []cmdCase[mgmt.UpOptions]{
		{args: nil, want: &mgmt.UpOptions{}},
		{args: []string{"--dry-run"}, want: &mgmt.UpOptions{DryRun: true}},
		{args: []string{"--yes"}, err: "unknown flag: --yes"},
		{args: []string{"lab1"}, err: `unknown command "lab1" for "labctl mgmt up"`},
	})
	testCommandLine(t, "mgmt status", newMgmtStatusCmd, append(outputCases(func(out string) *mgmt.StatusOptions {
		return &mgmt.StatusOptions{Output: out}
	}), cmdCase[mgmt.StatusOptions]{args: []string{"--dry-run"}, err: "unknown flag: --dry-run"}))
}

func TestImageCommandLines(t *testing.T) {
	testCommandLine(t, "image build", newImageBuildCmd, []cmdCase[imagebuild.BuildOptions]{
		{args: nil, want: &imagebuild.BuildOptions{}},
		{args: []string{"ubuntu-2404-kube", "--dry-run"}, want: &imagebuild.BuildOptions{Name: "ubuntu-2404-kube", DryRun: true}},
		{args: []string{"--image-builder", "/src/image-builder", "--kubernetes-version", "v1.35.4", "--verify"},
			want: &imagebuild.BuildOptions{ImageBuilder: "/src/image-builder", KubernetesVersion: "v1.35.4", Verify: true}},
		{args: []string{"a", "b"}, err: "accepts at most 1 arg(s), received 2"},
		{args: []string{"--verify=maybe"}, err: `invalid argument "maybe" for "--verify" flag`},
	})
	testCommandLine(t, "image list", newImageListCmd, append(outputCases(func(out string) *imagebuild.ListOptions {
		return &imagebuild.ListOptions{Output: out}
	}), cmdCase[imagebuild.ListOptions]{args: []string{"ubuntu"}, err: `unknown command "ubuntu" for "labctl image list"`}))
}

func TestClusterListAndDescribeCommandLines(t *testing.T) {
	testCommandLine(t, "cluster list", newClusterListCmd, append(outputCases(func(out string) *clusterReadOptions {
		return &clusterReadOptions{Output: out}
	}), cmdCase[clusterReadOptions]{args: []string{"lab1"}, err: `unknown command "lab1" for "labctl cluster list"`}))
	testCommandLine(t, "cluster describe", newClusterDescribeCmd, []cmdCase[clusterReadOptions]{
		{args: []string{"lab1"}, want: &clusterReadOptions{Name: "lab1", Output: "text"}},
		{args: []string{"lab1", "-o", "yaml"}, want: &clusterReadOptions{Name: "lab1", Output: "yaml"}},
		{args: []string{"lab1", "-o", "tree"}, err: `--output "tree": must be one of text, json, yaml`},
		{args: nil, err: "accepts 1 arg(s), received 0"},
		{args: []string{"lab1", "lab2"}, err: "accepts 1 arg(s), received 2"},
	})
}

func TestConfigValidateAndViewCommandLines(t *testing.T) {
	// validate has no flag of its own: -c picks the file, through the
	// lab's loader the run adds.
	testCommandLine(t, "config validate", newConfigValidateCmd, []cmdCase[configfile.ValidateOptions]{
		{args: nil, want: &configfile.ValidateOptions{}},
		{args: []string{"lab.yaml"}, err: `unknown command "lab.yaml" for "labctl config validate"`},
		{args: []string{"--strict"}, err: "unknown flag: --strict"},
	})
	testCommandLine(t, "config view", newConfigViewCmd, []cmdCase[configfile.ViewOptions]{
		{args: nil, want: &configfile.ViewOptions{Output: "yaml"}},
		{args: []string{"-o", "json"}, want: &configfile.ViewOptions{Output: "json"}},
		// text is the YAML itself.
		{args: []string{"-o", "text"}, want: &configfile.ViewOptions{Output: "text"}},
		{args: []string{"-o", "toml"}, err: `--output "toml": must be one of text, json, yaml`},
	})
}

func TestDoctorAndVersionCommandLines(t *testing.T) {
	testCommandLine(t, "doctor", newDoctorCmd, append(outputCases(func(out string) *doctor.Options {
		return &doctor.Options{Output: out}
	}), []cmdCase[doctor.Options]{
		{args: []string{"--skip-hypervisors", "-o", "json", "--kubeconfig", "mgmt.yaml"},
			want: &doctor.Options{Output: "json", Kubeconfig: "mgmt.yaml", SkipHypervisors: true}},
		{args: []string{"--dry-run"}, err: "unknown flag: --dry-run"},
	}...))
	testCommandLine(t, "version", newVersionCmd, append(outputCases(func(out string) *versioninfo.VersionOptions {
		return &versioninfo.VersionOptions{Output: out}
	}), cmdCase[versioninfo.VersionOptions]{args: []string{"extra"}, err: `unknown command "extra" for "labctl version"`}))
}

func TestStatusAndGCCommandLines(t *testing.T) {
	testCommandLine(t, "status", newStatusCmd, append(outputCases(func(out string) *labstatus.Options {
		return &labstatus.Options{Output: out, Timeout: labstatus.DefaultTimeout}
	}), []cmdCase[labstatus.Options]{
		{args: []string{"-o", "json", "--timeout", "30s"}, want: &labstatus.Options{Output: "json", Timeout: 30 * time.Second}},
		{args: []string{"--timeout", "0s"}, err: "--timeout must be more than 0"},
		{args: []string{"--timeout", "-1m"}, err: "--timeout must be more than 0"},
	}...))
	testCommandLine(t, "gc", newGCCmd, append(outputCases(func(out string) *orphans.Options {
		return &orphans.Options{Output: out}
	}), []cmdCase[orphans.Options]{
		{args: []string{"--dry-run", "-o", "json"}, want: &orphans.Options{DryRun: true, Output: "json"}},
		{args: []string{"-y", "--force"}, want: &orphans.Options{Yes: true, Force: true, Output: "text"}},
		{args: []string{"vm-201"}, err: `unknown command "vm-201" for "labctl gc"`},
	}...))
}
