// Package step runs the steps of a command: each looks at the real state,
// says what it would change, and changes only that. The runner shows one
// status line per step and supports dry runs.
package step

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/labctl/labctl/internal/ui"
)

// Step is one idempotent piece of work.
type Step struct {
	Name string
	// Plan reads the real state and returns the changes Apply would make, as
	// sentences ("create VM 201 on pv1-1"). Empty means up to date. It must
	// not change anything: dry runs call it. Nil means the step always runs
	// (a wait, for example).
	Plan func(ctx context.Context) ([]string, error)
	// Apply makes the changes. It must return soon after ctx is cancelled.
	Apply func(ctx context.Context) error
	// Check is a step that only reads (a connection, a prerequisite): it
	// runs in dry runs too, and its line ends with what it returns, e.g.
	// "PVE 8.4.1". A step with Check has no Plan or Apply.
	Check func(ctx context.Context) (string, error)
}

// Warning, returned by a Check, ends its step's line with a warning
// rather than a failure, and the run goes on: the step found something
// labctl leaves to the user, and Fix says how to do it.
type Warning struct {
	Detail string
	Fix    []string
}

func (w *Warning) Error() string { return w.Detail }

// Runner runs steps in order, stopping at the first failure.
type Runner struct {
	IO     *ui.IO
	DryRun bool
	// Verbose ≥ 1 lists each applied change under its step.
	Verbose int
}

// Run runs steps in order. It waits for a running step to return after ctx
// is cancelled, ends its line as interrupted and returns an error that
// wraps ctx.Err().
func (r *Runner) Run(ctx context.Context, steps []Step) error {
	if r.IO == nil {
		return errors.New("step runner has no IO")
	}
	status := r.IO.NewStatus()
	// A runner started inside another's step (mgmt install at the end of
	// mgmt up) owns the screen until it returns: the outer spinner stops
	// and the inner lines are indented under it.
	if parent, ok := ctx.Value(statusKey{}).(*ui.Status); ok {
		status.Nest(parent)
		parent.Pause()
		defer parent.Resume()
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped before %s: %w", s.Name, err)
		}
		if err := r.run(ctx, status, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) run(ctx context.Context, status *ui.Status, s Step) error {
	status.Start(s.Name)
	defer func() {
		// Stop the spinner so the panic is not drawn over.
		if p := recover(); p != nil {
			status.Fail("panic")
			panic(p)
		}
	}()
	ctx = context.WithValue(ctx, reporterKey{}, status.Update)
	ctx = context.WithValue(ctx, statusKey{}, status)

	if s.Check != nil {
		detail, err := s.Check(ctx)
		var w *Warning
		if errors.As(err, &w) && ctx.Err() == nil {
			status.Warn(w.Detail)
			r.list(status, "fix:", w.Fix)
			return nil
		}
		if err != nil {
			return fail(ctx, status, s.Name, err)
		}
		status.OK(detail)
		return nil
	}

	var changes []string
	if s.Plan != nil {
		var err error
		changes, err = s.Plan(ctx)
		if err != nil {
			return fail(ctx, status, s.Name, fmt.Errorf("plan: %w", err))
		}
		if len(changes) == 0 {
			status.OK("up to date")
			return nil
		}
	}

	if r.DryRun {
		if s.Plan == nil {
			status.Warn("would run")
			return nil
		}
		status.Warn("would change")
		r.list(status, "would:", changes)
		return nil
	}

	if s.Apply == nil {
		return fail(ctx, status, s.Name, errors.New("step has changes but no Apply"))
	}
	if err := s.Apply(ctx); err != nil {
		return fail(ctx, status, s.Name, err)
	}
	status.End(true)
	if r.Verbose > 0 {
		r.list(status, "did:", changes)
	}
	return nil
}

// fail ends the step's line and wraps err with the step name. A cancelled
// or expired ctx is reported as such, whatever error the step returned.
func fail(ctx context.Context, status *ui.Status, name string, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		status.End(false)
		return fmt.Errorf("%s: %w", name, err)
	}
	what := "interrupted"
	if errors.Is(cerr, context.DeadlineExceeded) {
		what = "timed out"
	}
	status.Fail(what + " after " + ui.Duration(status.Elapsed()))
	if !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", cerr, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}

func (r *Runner) list(status *ui.Status, verb string, changes []string) {
	st, indent := r.IO.Styles(r.IO.Err), status.Indent()
	var b strings.Builder
	for _, c := range changes {
		b.WriteString(indent + "  " + st.Dim.Render(verb) + " " + c + "\n")
	}
	_, _ = fmt.Fprint(r.IO.Err, b.String())
}

type reporterKey struct{}

// statusKey holds the running step's status line, for nested runners.
type statusKey struct{}

// Println prints a notice line to w, or, inside a running step, under
// that step's line so a spinner is never drawn over it (mgmt install's
// "Management stack onto ..." under mgmt up's "mgmt install" step).
func Println(ctx context.Context, w io.Writer, line string) {
	if st, ok := ctx.Value(statusKey{}).(*ui.Status); ok {
		st.Println(line)
		return
	}
	_, _ = fmt.Fprintln(w, line)
}

// Progress updates the running step's status line from inside Plan or
// Apply, e.g. Progress(ctx, "waiting for k3s API (%s)", elapsed). Without a
// runner in ctx it does nothing.
func Progress(ctx context.Context, format string, args ...any) {
	if report, ok := ctx.Value(reporterKey{}).(func(string)); ok {
		report(fmt.Sprintf(format, args...))
	}
}
