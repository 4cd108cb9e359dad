// Package configfile holds the use cases of 'labctl config': write a
// starter lab.yaml, check one, and show one with its defaults filled in.
// None of them reaches an outside system.
package configfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/userhome"
)

// Starter templates, by what the user runs labctl on.
const (
	proxmoxTemplate = "templates/proxmox.yaml"
	localTemplate   = "examples/local-kvm.yaml"
)

// InitOptions are the inputs of 'labctl config init'.
type InitOptions struct {
	IO     *ui.IO
	Path   string // "-" writes to stdout
	Force  bool
	DryRun bool
	// Local writes the one-machine libvirt lab (the built-in local-kvm one).
	Local bool
	// Proxmox, when set, is the Proxmox VE API URL written into the
	// Proxmox template in place of its placeholder.
	Proxmox string
}

// proxmoxURLLine is the url line of the Proxmox template, placeholder and
// CHANGE ME mark included.
var proxmoxURLLine = regexp.MustCompile(`(?m)^(\s*url: )https://pve\.example\.internal:8006 # CHANGE ME[^\n]*$`)

// Template returns the starter lab.yaml o asks for. It always validates:
// what config init writes must pass config validate unedited, so the
// user's first error is about their own change.
func Template(o InitOptions) ([]byte, error) {
	if o.Local && o.Proxmox != "" {
		return nil, errors.New("--local and --proxmox pick different labs; pass one")
	}
	name := proxmoxTemplate
	if o.Local {
		name = localTemplate
	}
	data, err := embedded.FS.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading the starter config: %w", err)
	}
	if o.Proxmox != "" {
		u, err := ProxmoxURL(o.Proxmox)
		if err != nil {
			return nil, err
		}
		if !proxmoxURLLine.Match(data) {
			return nil, errors.New("the Proxmox starter config has no url placeholder; this is a labctl bug")
		}
		data = proxmoxURLLine.ReplaceAll(data, []byte("${1}"+u.String()))
	}
	if _, err := config.Parse(name, data); err != nil {
		if o.Proxmox != "" {
			return nil, fmt.Errorf("--proxmox %s: the starter config does not validate with it: %w", o.Proxmox, err)
		}
		return nil, fmt.Errorf("the starter config %s does not validate; this is a labctl bug: %w", name, err)
	}
	return data, nil
}

// ProxmoxURL reads config init's --proxmox: the API URL, with PVE's port
// when it names none.
func ProxmoxURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		// Not echoed: url.Parse refuses what it cannot split, and that
		// may hold a password.
		return nil, errors.New("--proxmox: not a URL; want the Proxmox VE API URL, e.g. https://pve1.lan:8006")
	case u.User != nil:
		// Not echoed: what is before the @ may be a password.
		return nil, errors.New("--proxmox: the URL holds credentials; write only the address (e.g. https://pve1.lan:8006) and put the API token secret in the environment variable lab.yaml names")
	case u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("--proxmox %q: want the Proxmox VE API URL, e.g. https://pve1.lan:8006", s)
	}
	if u.Port() == "" {
		u.Host += ":8006" // the port PVE's API listens on; pveproxy has no other
	}
	return u, nil
}

// Init writes the commented starter lab.yaml.
func Init(o InitOptions) error {
	data, err := Template(o)
	if err != nil {
		return err
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
		if err := userhome.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	// lab.yaml holds no secrets, but the owner's addresses and token id
	// need not be world-readable: 0600, and an existing file is narrowed
	// too (WriteFile keeps the mode of a file it truncates).
	if err := os.WriteFile(o.Path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", o.Path, err)
	}
	if err := os.Chmod(o.Path, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", o.Path, err)
	}
	// 'sudo labctl config init' in the user's home leaves them their file.
	if err := userhome.Own(o.Path); err != nil {
		return err
	}
	next := "fill in the values marked CHANGE ME"
	if o.Local {
		next = "check the libvirt settings"
	}
	fmt.Fprintln(o.IO.Err, o.IO.Styles(o.IO.Err).OK(fmt.Sprintf("wrote %s; %s, then run 'labctl config validate -c %s'", o.Path, next, o.Path)))
	return nil
}

// ValidateOptions are the inputs of 'labctl config validate'.
type ValidateOptions struct {
	IO *ui.IO
	// LoadLab loads the lab config (the command factory's Lab); validate
	// reports its errors instead of returning them.
	LoadLab func(ctx context.Context) (*config.Lab, config.Source, error)
}

// ErrInvalid means the config was read but has problems; they were printed.
var ErrInvalid = errors.New("lab config is invalid")

// Validate loads the config and prints every problem, or a one-line OK.
func Validate(ctx context.Context, o ValidateOptions) error {
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

// ViewOptions are the inputs of 'labctl config view'.
type ViewOptions struct {
	IO *ui.IO
	// Lab is the loaded lab, and Source where it was read from.
	Lab    *config.Lab
	Source config.Source
	Output string // yaml (default) or json
}

// View prints the defaulted config. Secrets appear only as the references
// lab.yaml holds, so the output can be fed back in. ('labctl config view >
// lab.yaml' works: the loader never reads the file stdout is redirected
// into; see config.Request.Output.)
func View(ctx context.Context, o ViewOptions) error {
	src := o.Source
	lab := o.Lab
	fmt.Fprintf(o.IO.Err, "# source: %s\n", src)
	// Valid labs hold no credentials in URLs; this keeps a Go-built one's
	// from showing too.
	lab = config.Redacted(lab)
	if o.Output == "json" {
		return o.IO.Print("json", config.FileOf(lab), nil)
	}
	data, err := config.Marshal(lab)
	if err != nil {
		return err
	}
	_, err = o.IO.Out.Write(data)
	return err
}
