// Package app holds labctl's use cases that need no outside system: the
// config commands and version. Each takes an options struct from cmd/.
package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/ui"
)

// ConfigInitOptions are the inputs of 'labctl config init'.
type ConfigInitOptions struct {
	IO     *ui.IO
	Path   string // "-" writes to stdout
	Force  bool
	DryRun bool
}

// ConfigInit writes the commented starter lab.yaml.
func ConfigInit(o ConfigInitOptions) error {
	data, err := embedded.FS.ReadFile("templates/lab.yaml")
	if err != nil {
		return fmt.Errorf("reading the starter config: %w", err)
	}
	if o.Path == "-" {
		_, err := o.IO.Out.Write(data)
		return err
	}
	_, statErr := os.Stat(o.Path)
	exists := statErr == nil
	if exists && !o.Force {
		return fmt.Errorf("%s already exists; pass --force to overwrite it, or -c to write another file", o.Path)
	}
	if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", o.Path, statErr)
	}
	if o.DryRun {
		verb := "create"
		if exists {
			verb = "overwrite"
		}
		fmt.Fprintf(o.IO.Err, "would %s %s (%d bytes); nothing written\n", verb, o.Path, len(data))
		return nil
	}
	if dir := filepath.Dir(o.Path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	// lab.yaml holds no secrets, but the owner's addresses need not be world-readable.
	if err := os.WriteFile(o.Path, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", o.Path, err)
	}
	fmt.Fprintln(o.IO.Err, o.IO.Styles(o.IO.Err).OK(fmt.Sprintf("wrote %s; edit it, then run 'labctl config validate -c %s'", o.Path, o.Path)))
	return nil
}

// ConfigValidateOptions are the inputs of 'labctl config validate'.
type ConfigValidateOptions struct {
	IO *ui.IO
	// LoadLab loads the lab config (the command factory's Lab); validate
	// reports its errors instead of returning them.
	LoadLab func(ctx context.Context) (*config.Lab, config.Source, error)
}

// ErrInvalid means the config was read but has problems; they were printed.
var ErrInvalid = errors.New("lab config is invalid")

// ConfigValidate loads the config and prints every problem, or a one-line OK.
func ConfigValidate(ctx context.Context, o ConfigValidateOptions) error {
	lab, src, err := o.LoadLab(ctx)
	if err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			fmt.Fprintln(o.IO.Err, o.IO.Styles(o.IO.Err).Fail(fmt.Sprintf("%s: %d problem(s)", src, len(list))))
			for _, e := range list {
				fmt.Fprintf(o.IO.Err, "  %s\n", e)
			}
			return ErrInvalid
		}
		return err
	}
	fmt.Fprintln(o.IO.Out, o.IO.Styles(o.IO.Out).OK(fmt.Sprintf("%s is valid: lab %q, %d hypervisor(s), %d image(s), %d cluster(s)",
		src, lab.Metadata.Name, len(lab.Hypervisors), len(lab.Images), len(lab.Clusters))))
	return nil
}

// ConfigViewOptions are the inputs of 'labctl config view'.
type ConfigViewOptions struct {
	IO *ui.IO
	// Lab is the loaded lab, and Source where it was read from.
	Lab    *config.Lab
	Source config.Source
	Output string // yaml (default) or json
}

// ConfigView prints the defaulted config. Secrets appear only as the
// references lab.yaml holds, so the output can be fed back in.
func ConfigView(ctx context.Context, o ConfigViewOptions) error {
	fmt.Fprintf(o.IO.Err, "# source: %s\n", o.Source)
	// Valid labs hold no credentials in URLs; this keeps a Go-built one's
	// from showing too.
	lab := config.Redacted(o.Lab)
	if o.Output == "json" {
		return o.IO.Print("json", lab, nil)
	}
	data, err := config.Marshal(lab)
	if err != nil {
		return err
	}
	_, err = o.IO.Out.Write(data)
	return err
}
