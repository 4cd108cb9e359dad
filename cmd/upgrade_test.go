package cmd

import (
	"strings"
	"testing"
)

func TestUpgradeFlagErrorsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mgmt", "upgrade", "--charts", "flux"}, `--charts "flux": must be one of auto, helm-controller, helm-sdk`},
		{[]string{"mgmt", "upgrade", "--timeout", "0s"}, "--timeout 0s: must be more than 0"},
		{[]string{"mgmt", "upgrade", "extra"}, `unknown command "extra" for "labctl mgmt upgrade"`},
		{[]string{"cluster", "upgrade", "lab1", "--to", "v1.36.0"}, "--to: v1.36.0 is not supported: Cluster API 1.12 with CAPMOX v0.9 runs v1.31 to v1.35"},
		{[]string{"cluster", "upgrade", "lab1", "--to", "latest"}, `--to: "latest" is not a Kubernetes version such as v1.35.4`},
		{[]string{"cluster", "upgrade", "lab1", "--timeout", "0s"}, "--timeout 0s: must be more than 0"},
		{[]string{"cluster", "upgrade"}, "accepts 1 arg(s), received 0"},
	} {
		code, _, errOut := run(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--help' for usage") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}

func TestUpgradeHelpTeaches(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"mgmt", "upgrade", "--help"}, []string{"labctl mgmt upgrade --dry-run", "--yes", "a re-run", "Ctrl-C", "downgrade", "contract", "over SSH"}},
		{[]string{"cluster", "upgrade", "--help"}, []string{"labctl cluster upgrade lab1 --dry-run", "--to v1.35.4", "maxSurge 0", "labctl image build", "naming the Machine", "Run the\nsame command again"}},
	} {
		code, out, _ := run(t, "", tc.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d", tc.args, code)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("%v lacks %q:\n%s", tc.args, want, out)
			}
		}
	}
}
