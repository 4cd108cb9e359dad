package step_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
)

// durations matches the time at the end of a step's final line.
var durations = regexp.MustCompile(`(?m)^([✓✗!] .*[( ])[0-9]+(\.[0-9])?(ms|s)\)$`)

// run runs steps in plain mode and returns what the user sees on stderr,
// with durations replaced by D.
func run(t *testing.T, ctx context.Context, r step.Runner, steps []step.Step) (string, error) {
	t.Helper()
	io, _, out, errOut := ui.Test()
	r.IO = io
	err := r.Run(ctx, steps)
	if out.Len() != 0 {
		t.Errorf("runner wrote to stdout: %q", out.String())
	}
	return durations.ReplaceAllString(errOut.String(), "${1}D)"), err
}

func changes(c ...string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return c, nil }
}

// applied records which steps' Apply ran.
type applied []string

func (a *applied) apply(name string) func(context.Context) error {
	return func(context.Context) error { *a = append(*a, name); return nil }
}

func TestRun(t *testing.T) {
	var did applied
	steps := []step.Step{
		{Name: "upload image", Plan: changes(), Apply: did.apply("upload image")},
		{Name: "create VM", Plan: changes("create VM 201 on pv1-1"), Apply: did.apply("create VM")},
		{Name: "wait for k3s", Apply: func(ctx context.Context) error {
			step.Progress(ctx, "waiting for k3s API (%ds)", 12)
			did = append(did, "wait for k3s")
			return nil
		}},
	}
	got, err := run(t, context.Background(), step.Runner{}, steps)
	if err != nil {
		t.Fatal(err)
	}
	want := `• upload image ...
✓ upload image (up to date)
• create VM ...
✓ create VM (D)
• wait for k3s ...
  waiting for k3s API (12s)
✓ wait for k3s (D)
`
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if w := []string{"create VM", "wait for k3s"}; strings.Join(did, ",") != strings.Join(w, ",") {
		t.Errorf("applied %v, want %v", did, w)
	}
}

func TestRunVerboseListsChanges(t *testing.T) {
	var did applied
	steps := []step.Step{{Name: "create VMs", Plan: changes("create VM 201 on pv1-1", "create VM 202 on pv1-2"), Apply: did.apply("create VMs")}}
	got, err := run(t, context.Background(), step.Runner{Verbose: 1}, steps)
	if err != nil {
		t.Fatal(err)
	}
	want := `• create VMs ...
✓ create VMs (D)
  did: create VM 201 on pv1-1
  did: create VM 202 on pv1-2
`
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestRunDryRunNeverApplies(t *testing.T) {
	var did applied
	planned := 0
	steps := []step.Step{
		{Name: "upload image", Plan: changes(), Apply: did.apply("upload image")},
		{Name: "create VMs", Plan: func(ctx context.Context) ([]string, error) {
			planned++
			step.Progress(ctx, "listing VMs on pv1-1")
			return []string{"create VM 201 on pv1-1", "create VM 202 on pv1-2"}, nil
		}, Apply: did.apply("create VMs")},
		{Name: "wait for k3s", Apply: did.apply("wait for k3s")},
	}
	got, err := run(t, context.Background(), step.Runner{DryRun: true}, steps)
	if err != nil {
		t.Fatal(err)
	}
	want := `• upload image ...
✓ upload image (up to date)
• create VMs ...
  listing VMs on pv1-1
! create VMs (would change)
  would: create VM 201 on pv1-1
  would: create VM 202 on pv1-2
• wait for k3s ...
! wait for k3s (would run)
`
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if len(did) != 0 {
		t.Errorf("dry run applied %v", did)
	}
	if planned != 1 {
		t.Errorf("Plan called %d times, want 1", planned)
	}
}

func TestRunUpToDateSkipsApply(t *testing.T) {
	var did applied
	steps := []step.Step{{Name: "create VM", Plan: changes(), Apply: did.apply("create VM")}}
	got, err := run(t, context.Background(), step.Runner{}, steps)
	if err != nil {
		t.Fatal(err)
	}
	if want := "• create VM ...\n✓ create VM (up to date)\n"; got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if len(did) != 0 {
		t.Errorf("up-to-date step applied: %v", did)
	}
}

func TestRunStopsAtFirstFailure(t *testing.T) {
	boom := errors.New("storage local-lvm is full")
	var did applied
	steps := []step.Step{
		{Name: "upload image", Plan: changes("upload debian-12.qcow2"), Apply: did.apply("upload image")},
		{Name: "create VM", Plan: changes("create VM 201 on pv1-1"), Apply: func(context.Context) error { return boom }},
		{Name: "start VM", Apply: did.apply("start VM")},
	}
	got, err := run(t, context.Background(), step.Runner{}, steps)
	if !errors.Is(err, boom) || err.Error() != "create VM: storage local-lvm is full" {
		t.Errorf("error = %v, want it to name the step and wrap the cause", err)
	}
	want := `• upload image ...
✓ upload image (D)
• create VM ...
✗ create VM (D)
`
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if strings.Join(did, ",") != "upload image" {
		t.Errorf("applied %v, want only upload image", did)
	}
}

func TestRunPlanError(t *testing.T) {
	boom := errors.New("401 Unauthorized")
	var did applied
	steps := []step.Step{
		{Name: "create VM", Plan: func(context.Context) ([]string, error) { return nil, boom }, Apply: did.apply("create VM")},
		{Name: "start VM", Apply: did.apply("start VM")},
	}
	got, err := run(t, context.Background(), step.Runner{DryRun: true}, steps)
	if !errors.Is(err, boom) || err.Error() != "create VM: plan: 401 Unauthorized" {
		t.Errorf("error = %v", err)
	}
	if want := "• create VM ...\n✗ create VM (D)\n"; got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if len(did) != 0 {
		t.Errorf("applied %v after a plan error", did)
	}
}

func TestRunInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apply func(ctx context.Context) error
	}{
		{"returns ctx error", func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		// A step may lose the cancellation in its own error; the runner
		// still reports it.
		{"returns other error", func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("read tcp: use of closed network connection")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var did applied
			steps := []step.Step{
				{Name: "wait for k3s", Apply: func(ctx context.Context) error {
					time.AfterFunc(20*time.Millisecond, cancel) // Ctrl-C mid-Apply
					return tc.apply(ctx)
				}},
				{Name: "install CAPI", Apply: did.apply("install CAPI")},
			}
			got, err := run(t, ctx, step.Runner{}, steps)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error = %v, want context.Canceled", err)
			}
			if err == nil || !strings.HasPrefix(err.Error(), "wait for k3s: ") {
				t.Errorf("error = %v, want it to name the step", err)
			}
			if want := "• wait for k3s ...\n✗ wait for k3s (interrupted after D)\n"; got != want {
				t.Errorf("output:\n%s\nwant:\n%s", got, want)
			}
			if len(did) != 0 {
				t.Errorf("steps after the interrupt ran: %v", did)
			}
		})
	}
}

func TestRunTimedOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	steps := []step.Step{{Name: "wait for k3s", Apply: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}}
	got, err := run(t, ctx, step.Runner{}, steps)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error = %v, want DeadlineExceeded", err)
	}
	if want := "• wait for k3s ...\n✗ wait for k3s (timed out after D)\n"; got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var did applied
	got, err := run(t, ctx, step.Runner{}, []step.Step{{Name: "create VM", Apply: did.apply("create VM")}})
	if !errors.Is(err, context.Canceled) || err.Error() != "stopped before create VM: context canceled" {
		t.Errorf("error = %v", err)
	}
	if got != "" || len(did) != 0 {
		t.Errorf("output %q, applied %v; want nothing", got, did)
	}
}

func TestRunAnimated(t *testing.T) {
	io, _, _, errOut := ui.Test()
	io.Animate = true
	r := step.Runner{IO: io}
	err := r.Run(context.Background(), []step.Step{
		{Name: "upload image", Plan: changes()},
		{Name: "wait for k3s", Apply: func(ctx context.Context) error {
			step.Progress(ctx, "waiting for k3s API (%ds)", 3)
			time.Sleep(250 * time.Millisecond)
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := errOut.String()
	if !strings.Contains(got, "\r") || !strings.Contains(got, "wait for k3s: waiting for k3s API (3s)") {
		t.Errorf("no in-place progress in %q", got)
	}
	if strings.Contains(got, "•") {
		t.Errorf("animated output has plain start lines: %q", got)
	}
	if !regexp.MustCompile(`\r\x1b\[2K✓ upload image \(up to date\)\n`).MatchString(got) {
		t.Errorf("no up-to-date line in %q", got)
	}
	if !regexp.MustCompile(`\r\x1b\[2K✓ wait for k3s \([0-9.]+(ms|s)\)\n$`).MatchString(got) {
		t.Errorf("output does not end with the ✓ line: %q", got)
	}
}

func TestRunNoEscapesWithoutColor(t *testing.T) {
	got, _ := run(t, context.Background(), step.Runner{DryRun: true}, []step.Step{
		{Name: "create VM", Plan: changes("create VM 201 on pv1-1")},
		{Name: "fail", Plan: func(context.Context) ([]string, error) { return nil, errors.New("x") }},
	})
	if strings.Contains(got, "\x1b") {
		t.Errorf("escape codes without colour: %q", got)
	}
}

// Progress reaches only the runner whose step's ctx it is given: with a
// context that carries no runner it shows nowhere (and does not panic).
func TestProgressWithoutRunner(t *testing.T) {
	step.Progress(context.Background(), "nobody listens (%d)", 1)
	io, _, _, errOut := ui.Test()
	io.Animate = true
	r := step.Runner{IO: io}
	err := r.Run(context.Background(), []step.Step{{Name: "wait for k3s", Apply: func(ctx context.Context) error {
		step.Progress(context.Background(), "nobody listens (%d)", 2)
		step.Progress(ctx, "k3s answers (%d)", 3)
		return nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	got := errOut.String()
	if strings.Contains(got, "nobody listens") || !strings.Contains(got, "wait for k3s: k3s answers (3)") {
		t.Errorf("progress without a runner shown, or the step's own missing: %q", got)
	}
}

// A Check that returns a Warning ends its line with "!" and its fix
// listed under it, and the run goes on, in dry runs too.
func TestRunCheckWarningGoesOn(t *testing.T) {
	for _, dry := range []bool{false, true} {
		var did applied
		steps := []step.Step{
			{Name: "size of VM mgmt", Check: func(context.Context) (string, error) {
				return "", fmt.Errorf("wrapped: %w", &step.Warning{Detail: "4 CPUs, lab.yaml asks 8", Fix: []string{"qm set 201 --cores 8", "qm reboot 201"}})
			}},
			{Name: "start VM", Apply: did.apply("start VM")},
		}
		got, err := run(t, context.Background(), step.Runner{DryRun: dry}, steps)
		if err != nil {
			t.Fatalf("dry %v: %v", dry, err)
		}
		want := `• size of VM mgmt ...
! size of VM mgmt (4 CPUs, lab.yaml asks 8)
  fix: qm set 201 --cores 8
  fix: qm reboot 201
`
		if !strings.HasPrefix(got, want) {
			t.Errorf("dry %v: output:\n%s\nwant it to start with:\n%s", dry, got, want)
		}
		if ran := len(did) == 1; ran == dry {
			t.Errorf("dry %v: applied %v", dry, did)
		}
	}
}
