package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
)

// The command seam, on gh's model (pkg/cmd/pr/merge: NewCmdMerge(f,
// runF)). A command's constructor takes the factory and a runF. The
// command parses its flags and arguments into its options struct and
// refuses what no run could take (usage errors, exit 2); then it calls
// runF with the options, or its real run when runF is nil. The real run
// is the one place that loads the lab and reaches the systems, so a test
// that hands in its own runF table-tests the command line alone, without
// a lab or a cluster (seam_test.go).

// runFunc is what a command does once its command line is checked.
type runFunc[O any] func(ctx context.Context, o *O) error

// orRun is runF when a test handed one in, else the command's real run.
func orRun[O any](runF, run runFunc[O]) runFunc[O] {
	if runF != nil {
		return runF
	}
	return run
}

// Every runnable command says whether it changes anything, in its
// annotations: TestEveryCommandSaysWhatItChanges fails for a command that
// says neither, and for one that changes things without --dry-run.
// addDryRunFlag marks its command as changing; a command that defines
// its own --dry-run calls changesThings, and one that only reads calls
// readsOnly.
const (
	effectAnnotation = "labctl/effect"
	effectChanges    = "changes"
	effectReads      = "reads"
)

// changesThings marks c as a command that changes something: it must have
// --dry-run.
func changesThings(c *cobra.Command) { setEffect(c, effectChanges) }

// readsOnly marks c as a command that changes nothing.
func readsOnly(c *cobra.Command) { setEffect(c, effectReads) }

func setEffect(c *cobra.Command, effect string) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[effectAnnotation] = effect
}

// withLab is a real run that loads the lab first.
func withLab[O any](f *cmdutil.Factory, run func(ctx context.Context, lab *config.Lab, o *O) error) runFunc[O] {
	return withLabFrom(f, func(ctx context.Context, lab *config.Lab, _ config.Source, o *O) error {
		return run(ctx, lab, o)
	})
}

// withLabFrom is withLab for a run that also says where the lab was read
// from.
func withLabFrom[O any](f *cmdutil.Factory, run func(ctx context.Context, lab *config.Lab, src config.Source, o *O) error) runFunc[O] {
	return func(ctx context.Context, o *O) error {
		lab, src, err := f.Lab(ctx)
		if err != nil {
			return err
		}
		return run(ctx, lab, src, o)
	}
}

// clusterArgs are what every cluster verb is given: the cluster's name
// and --dry-run.
type clusterArgs struct {
	Name   string
	DryRun bool
}

func (a *clusterArgs) target() *clusterArgs { return a }

// withCluster is a real run of a cluster verb: it makes the options every
// cluster command shares (Factory.ClusterOptions; with inLab the name must
// be one of lab.yaml's clusters) and hands them to run.
func withCluster[O any, P interface {
	*O
	target() *clusterArgs
}](f *cmdutil.Factory, inLab bool, run func(ctx context.Context, co cluster.Options, o P) error) runFunc[O] {
	return func(ctx context.Context, o *O) error {
		a := P(o).target()
		co, err := f.ClusterOptions(ctx, a.Name, inLab, a.DryRun)
		if err != nil {
			return err
		}
		return run(ctx, co, o)
	}
}
