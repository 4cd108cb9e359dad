// Package cmd holds labctl's cobra commands. Each turns flags into an options
// struct and calls one function in internal/; no logic lives here.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2 // bad flags and arguments
	// A signal ends labctl with 128 + its number, as a shell reports a
	// process the signal killed: 130 for SIGINT (Ctrl-C), 143 for SIGTERM.
	exitInterrupted = 128 + int(syscall.SIGINT)
)

// signalled is why Main's context ends: the signal that arrived.
type signalled struct{ sig syscall.Signal }

func (s signalled) Error() string { return "interrupted by " + s.sig.String() }

// usageError is a mistake in how labctl was called.
type usageError struct{ error }

// Main runs labctl with the process's arguments and returns the exit code.
func Main() int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if s, ok := (<-sigs).(syscall.Signal); ok {
			cancel(signalled{s})
		}
	}()
	kube.CancelDialsOn(ctx)
	io := ui.System()
	return Run(ctx, cmdutil.New(io, &cmdutil.Settings{}), os.Args[1:])
}

// Run executes one labctl invocation over f; tests hand in a Factory
// with their own streams, and fakes where they need them.
func Run(ctx context.Context, f *cmdutil.Factory, args []string) int {
	return execute(ctx, f.IO, NewRoot(f), args)
}

// execute runs root with args and turns what it returns into the exit
// code, saying why on io.Err.
func execute(ctx context.Context, io *ui.IO, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	var code codeError
	switch {
	case ctx.Err() != nil:
		// Whatever the command made of it, a signal ends with its own code.
		var sig signalled
		if errors.As(context.Cause(ctx), &sig) && sig.sig != syscall.SIGINT {
			fmt.Fprintf(io.Err, "Error: interrupted (%s)\n", sig.sig)
			return 128 + int(sig.sig)
		}
		fmt.Fprintln(io.Err, "Error: interrupted")
		return exitInterrupted
	case errors.As(err, &code):
		return code.code
	}
	fmt.Fprintf(io.Err, "Error: %s\n", err)
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(io.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

// codeError ends labctl with a code after the command already said why.
type codeError struct{ code int }

func (e codeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// NewRoot builds the whole command tree over f. The global flags are
// read into f.Settings before any command runs.
func NewRoot(f *cmdutil.Factory) *cobra.Command {
	io, g := f.IO, f.Settings
	var noColor bool
	v := viper.New()
	v.SetEnvPrefix("LABCTL")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()

	root := &cobra.Command{
		Use:   "labctl",
		Short: "Run a home-lab Kubernetes platform from one lab.yaml",
		Long: `labctl turns one lab.yaml into a working home-lab Kubernetes platform:
a k3s management VM on Proxmox VE or libvirt, Cluster API with the Proxmox
provider, and workload clusters whose workers scale from 0 to N and back.

Everything labctl knows comes from lab.yaml and from the real systems it
describes: VMs tagged "labctl" on the hypervisors and Cluster API objects in
the management cluster. There is no state file to lose.

Start here:
  labctl config init              write a commented lab.yaml to edit
  labctl config validate          check it, every error at once
  labctl mgmt up                  create the management VM and install the stack
  labctl cluster create lab1      create a workload cluster

Without a lab.yaml, labctl uses its built-in one-machine lab (local-kvm).

Exit codes: 0 done, 1 failed, 2 usage error (unknown command or flag, wrong
arguments), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).`,
		Example:       "  labctl config init\n  labctl mgmt up --dry-run\n  labctl cluster create lab1",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Flags win over LABCTL_* variables, which win over defaults.
			g.Config = v.GetString("config")
			g.Kubeconfig = v.GetString("kubeconfig")
			g.ConfigExplicit = cmd.Flags().Changed("config") || os.Getenv("LABCTL_CONFIG") != ""
			if noColor {
				io.Plain()
			}
			return nil
		},
	}
	root.SetIn(io.In)
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	pf := root.PersistentFlags()
	pf.StringVarP(&g.Config, "config", "c", "./lab.yaml", "lab config file, or - to read stdin (env LABCTL_CONFIG)")
	pf.StringVar(&g.Kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster (env LABCTL_KUBECONFIG; default: $KUBECONFIG, else the one labctl stored for this lab)")
	pf.CountVarP(&g.Verbose, "verbose", "v", "print more detail; repeat for more")
	pf.BoolVar(&noColor, "no-color", false, "plain output without colour or animation (also NO_COLOR)")
	_ = v.BindPFlag("config", pf.Lookup("config"))
	_ = v.BindPFlag("kubeconfig", pf.Lookup("kubeconfig"))

	root.AddGroup(
		&cobra.Group{ID: "lab", Title: "Lab commands:"},
		&cobra.Group{ID: "setup", Title: "Setup and inspection:"},
	)
	for _, c := range []*cobra.Command{newMgmtCmd(f), newImageCmd(f), newClusterCmd(f), newScaleTestCmd(f, nil), newStatusCmd(f, nil), newGCCmd(f, nil)} {
		c.GroupID = "lab"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newConfigCmd(f), newDoctorCmd(f, nil), newVersionCmd(f, nil)} {
		c.GroupID = "setup"
		root.AddCommand(c)
	}
	root.AddCommand(providerCmds(f)...)
	root.SetHelpCommand(newHelpCmd())
	root.SetHelpCommandGroupID("setup")
	root.SetCompletionCommandGroupID("setup")
	// cobra adds these two only when it executes; added now, usageErrors
	// reaches them too ('completion tcsh', 'completion bash extra').
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	completionCmds(root)
	usageErrors(root)
	return root
}

// usageErrors makes every argument mistake a usage error (exit 2, with a
// pointer to --help). A command that only groups others (labctl cluster)
// prints its help when called alone, and refuses an unknown subcommand:
// cobra would print the help and exit 0 for 'labctl cluster delte'.
func usageErrors(c *cobra.Command) {
	if c.HasSubCommands() && c.RunE == nil && c.Run == nil {
		c.Args = unknownSubcommand
		c.SuggestionsMinimumDistance = 2 // cobra's default for the root
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if c.Args == nil {
		c.Args = cobra.NoArgs
	}
	check := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		// cobra checks flag groups after Args, as a plain error (exit 1);
		// checked here first they are usage errors too.
		if err := cmd.ValidateFlagGroups(); err != nil {
			return usageError{exclusiveFlags(cmd, err)}
		}
		return nil
	}
	for _, sub := range c.Commands() {
		usageErrors(sub)
	}
}

// unknownSubcommand names the unknown subcommand and what was meant, as
// cobra does for the root command.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return errors.New(msg)
}

// exclusiveFlags says which of cmd's mutually exclusive flags were given
// together, in place of cobra's "if any flags in the group [...]" text.
func exclusiveFlags(cmd *cobra.Command, err error) error {
	var msg string
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		for _, group := range fl.Annotations["cobra_annotation_mutually_exclusive"] {
			var set []string
			for _, name := range strings.Fields(group) {
				if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
					set = append(set, "--"+name)
				}
			}
			if msg == "" && len(set) > 1 {
				msg = strings.Join(set, " and ") + " cannot be used together; pass only one"
			}
		}
	})
	if msg == "" {
		return err
	}
	return errors.New(msg)
}

// newHelpCmd is cobra's help command, but an unknown topic is a usage
// error: cobra prints the root's usage and exits 0 for 'labctl help nope'.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "help [command]",
		Short:   "Help about any command",
		Long:    "Help prints the help of any command: labctl help [path to command].",
		Example: "  labctl help cluster create",
		Args:    cobra.ArbitraryArgs,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil || cmd == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || cmd == nil || len(rest) > 0 {
				return usageError{fmt.Errorf("unknown help topic %q; 'labctl --help' lists the commands", strings.Join(args, " "))}
			}
			cmd.InitDefaultHelpFlag()
			return cmd.Help()
		},
	}
}

// completionCmds gives cobra's completion commands the examples every
// labctl command has, and makes an unknown shell name the shells there
// are: cobra's suggestions for 'completion tcsh' leave powershell out.
func completionCmds(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = "  labctl completion bash > ~/.local/share/bash-completion/completions/labctl"
		readsOnly(c)
		var shells []string
		for _, sh := range c.Commands() {
			sh.Example = "  labctl completion " + sh.Name() + " --help"
			readsOnly(sh)
			shells = append(shells, sh.Name())
		}
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return fmt.Errorf("unknown shell %q for %q; labctl completes %s and %s", args[0], cmd.CommandPath(), strings.Join(shells[:len(shells)-1], ", "), shells[len(shells)-1])
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}
