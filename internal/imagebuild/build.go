package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/redact"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/userhome"
	"github.com/labctl/labctl/internal/versions"
)

// Templater is what image build and list need from a Proxmox driver.
type Templater interface {
	// Templates are the templates tagged labctl.
	Templates(ctx context.Context) ([]hypervisor.VM, error)
	AddTags(ctx context.Context, node string, vmid int, tags []string) error
	// NodeTemplates are every template on a node, tagged or not: they
	// hold the one image-builder made before labctl tags it.
	NodeTemplates(ctx context.Context, node string) ([]hypervisor.VM, error)
	// Storages gives the storage type the disk format depends on.
	Storages(ctx context.Context, node string) ([]proxmox.Storage, error)
}

var _ Templater = (*proxmox.Driver)(nil)

// BuildOptions are the inputs of 'labctl image build'.
type BuildOptions struct {
	IO *ui.IO
	// Lab is the loaded lab, and Source where it was read from.
	Lab    *config.Lab
	Source config.Source
	// Name is the image to build; empty builds every image.
	Name string
	// ImageBuilder overrides images[].imageBuilder.
	ImageBuilder string
	DryRun       bool
	Verbose      int
	// Verify reads back the volumes of libvirt hosts that look complete
	// and hashes them, re-uploading one whose bytes differ; without it a
	// host holds the image when the verified-upload marker is there and
	// the volume is as long as the qcow2.
	Verify bool
	// Driver opens the lab's hypervisor called name.
	Driver func(ctx context.Context, name string) (hypervisor.Driver, error)
	// Environ is the base child environment (default os.Environ()).
	Environ []string
	// KubernetesVersion, when set, builds the images at this version
	// instead of images[].kubernetesVersion: the image 'cluster upgrade
	// --to' needs before lab.yaml says so.
	KubernetesVersion string
}

// Build builds each selected image in lab.yaml and tags its template.
func Build(ctx context.Context, o BuildOptions) error {
	lab, src := o.Lab, o.Source
	imgs := lab.Images
	if o.Name != "" {
		img, err := lab.Image(o.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		imgs = []config.Image{*img}
	}
	if len(imgs) == 0 {
		return fmt.Errorf("lab.yaml (%s) lists no images; add one under images", src)
	}
	if v := o.KubernetesVersion; v != "" {
		if err := config.CheckKubernetesVersion(v); err != nil {
			return fmt.Errorf("--kubernetes-version: %w", err)
		}
		imgs = slices.Clone(imgs)
		for i := range imgs {
			imgs[i].KubernetesVersion = v
		}
	}
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	pins, err := versions.Get()
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Err, "lab %s (%s): %d image(s), image-builder %s, packer %s\n", lab.Metadata.Name, src, len(imgs), pins.ImageBuilder, pins.Packer)
	for _, img := range imgs {
		if err := buildOne(ctx, o, lab, img, pins); err != nil {
			return fmt.Errorf("image %s: %w", img.Name, err)
		}
	}
	if o.DryRun {
		fmt.Fprintln(o.IO.Err, "dry run: nothing was built or changed")
	}
	return nil
}

// builderDir is the image-builder checkout for img (--image-builder,
// else images[].imageBuilder), resolved to its images/capi.
func (o BuildOptions) builderDir(img config.Image, pins versions.Pins, builder string) (string, error) {
	dir := o.ImageBuilder
	if dir == "" {
		dir = img.ImageBuilder
	}
	return FindBuilder(dir, pins.ImageBuilder, builder)
}

// plan is one image's build, worked out before anything runs.
type plan struct {
	dir, target, varFile, logPath string
	vars, env                     map[string]string
	childEnv                      []string
	sc                            *Scrubber
}

func prepare(o BuildOptions, lab *config.Lab, img config.Image, pins versions.Pins) (*plan, error) {
	h, n, err := target(lab, img)
	if err != nil {
		return nil, err
	}
	vars, err := Vars(lab, img)
	if err != nil {
		return nil, err
	}
	dir, err := o.builderDir(img, pins, "proxmox")
	if err != nil {
		return nil, err
	}
	// A dry run never runs make: without the secret it still shows the
	// plan, and the hypervisor it cannot reach without it says why.
	secret, err := h.ReadTokenSecret()
	if err != nil && !o.DryRun {
		return nil, err
	}
	folder, err := files.StatePath(lab.Metadata.Name, "images")
	if err != nil {
		return nil, err
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	p := &plan{
		dir: dir, target: Target(img), vars: vars, env: Env(h, n, secret), sc: NewScrubber(secret),
		varFile: filepath.Join(folder, img.Name+".vars.json"),
		logPath: filepath.Join(folder, img.Name+"-"+stamp+".log"),
	}
	p.childEnv = childEnviron(o.Environ, dir, p.env, p.varFile)
	return p, nil
}

// childEnviron is make's environment: environ without inherited Proxmox
// and Packer settings, so only ours reach the child (PACKER_FLAGS is
// cleared because image-builder's re-export lost flags there in the
// owner's lab), image-builder's .local/bin first on PATH, then env and
// PACKER_VAR_FILES.
func childEnviron(environ []string, dir string, env map[string]string, varFile string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PROXMOX_") || k == "PACKER_VAR_FILES" || k == "PACKER_FLAGS" {
			continue
		}
		if k == "PATH" {
			// image-builder's 'make deps-<builder>' installs packer here.
			kv = "PATH=" + filepath.Join(dir, ".local", "bin") + string(os.PathListSeparator) + kv[len("PATH="):]
		}
		out = append(out, kv)
	}
	for _, k := range Names(env) {
		out = append(out, k+"="+env[k])
	}
	return append(out, "PACKER_VAR_FILES="+varFile)
}

func (p *plan) path() string { return lookupPath(p.childEnv) }

// show prints the dry run's var file, env names and command on stdout.
func (p *plan) show(w io.Writer) error {
	data, err := json.MarshalIndent(p.vars, "", "  ")
	if err != nil {
		return err
	}
	names := append(Names(p.env), "PACKER_VAR_FILES")
	_, err = fmt.Fprintf(w, "# variable file %s\n%s\n# environment (names only): %s\n# command\ncd %s && PACKER_VAR_FILES=%s make %s\n",
		p.varFile, p.sc.Bytes(data), strings.Join(names, " "), p.dir, p.varFile, p.target)
	return err
}

func buildOne(ctx context.Context, o BuildOptions, lab *config.Lab, img config.Image, pins versions.Pins) error {
	if h, err := lab.Hypervisor(img.Hypervisor); err == nil && h.Proxmox == nil {
		return buildQEMU(ctx, o, lab, img, pins)
	}
	p, err := prepare(o, lab, img, pins)
	if err != nil {
		return err
	}
	node := p.vars["node"]
	drv, tm, unchecked, err := openTemplater(ctx, o, lab, img)
	if err != nil {
		return err
	}
	if tm != nil {
		defer func() { _ = drivers.Close(drv) }()
		format, err := diskFormat(ctx, tm, node, p.vars["storage_pool"])
		if err != nil {
			return err
		}
		p.vars["disk_format"] = format
	}
	if o.DryRun {
		if err := p.show(o.IO.Out); err != nil {
			return err
		}
		if unchecked != "" {
			fmt.Fprintf(o.IO.Out, "# disk_format: not checked (the type of storage %s decides it): %s\n", p.vars["storage_pool"], unchecked)
		}
	}
	tags := img.TemplateTags()
	name := p.vars["artifact_name"]
	var vmid int
	var adopted bool
	steps := []step.Step{
		{
			// Checked in dry runs too; nothing to change when they are met.
			Name: "prerequisites",
			Plan: func(ctx context.Context) ([]string, error) {
				return nil, Prereqs(ctx, p.path(), pins.Packer, "deps-proxmox")
			},
		},
		{
			Name: "build " + img.Name,
			Plan: func(ctx context.Context) ([]string, error) {
				if tm == nil {
					return []string{fmt.Sprintf("run make %s in %s (Kubernetes %s, node %s, template %s), unless the template is there already (not checked: %s)",
						p.target, p.dir, img.KubernetesVersion, node, name, unchecked)}, nil
				}
				have, err := find(ctx, tm, tags)
				if err != nil || have != nil {
					return nil, err
				}
				left, err := untagged(ctx, tm, node, name)
				if err != nil {
					return nil, err
				}
				if left != nil {
					// An earlier run built it but did not tag it: take it
					// rather than build a duplicate.
					vmid, adopted = left.ID, true
					return []string{fmt.Sprintf("use template %d (%s), which an earlier build left untagged, instead of building another", vmid, name)}, nil
				}
				return []string{fmt.Sprintf("run make %s in %s (Kubernetes %s, node %s, template %s)", p.target, p.dir, img.KubernetesVersion, node, name)}, nil
			},
			Apply: func(ctx context.Context) error {
				if adopted {
					return nil
				}
				id, err := p.build(ctx)
				if err != nil {
					return err
				}
				vmid, err = built(ctx, tm, node, name, id, p.logPath)
				return err
			},
		},
		{
			Name: "tag " + img.Name,
			Plan: func(ctx context.Context) ([]string, error) {
				if tm == nil {
					return []string{"tag the new template " + strings.Join(tags, ", ")}, nil
				}
				have, err := find(ctx, tm, tags)
				if err != nil || have != nil {
					return nil, err
				}
				if vmid == 0 {
					return []string{"tag the new template " + strings.Join(tags, ", ")}, nil
				}
				return []string{fmt.Sprintf("tag template %d (%s) %s", vmid, name, strings.Join(tags, ", "))}, nil
			},
			Apply: func(ctx context.Context) error {
				return tm.AddTags(ctx, node, vmid, tags)
			},
		},
	}
	r := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	if err := r.Run(ctx, steps); err != nil {
		return err
	}
	if !o.DryRun {
		if t, err := find(ctx, tm, tags); err == nil && t != nil {
			fmt.Fprintf(o.IO.Err, "template %d on %s tagged %s\n", t.ID, t.Node, strings.Join(tags, ";"))
		}
	}
	return nil
}

// openTemplater opens and reaches img's Proxmox hypervisor. A dry run
// that cannot goes on without it: it returns no Templater and why, and
// the plan marks what it could not check. A build stops.
func openTemplater(ctx context.Context, o BuildOptions, lab *config.Lab, img config.Image) (hypervisor.Driver, Templater, string, error) {
	drv, err := o.Driver(ctx, img.Hypervisor)
	if err == nil {
		if err = drivers.Reach(ctx, o.IO, drv); err != nil {
			_ = drivers.Close(drv)
		}
	}
	if err != nil {
		h, _, terr := target(lab, img)
		if !o.DryRun || terr != nil || ctx.Err() != nil {
			return nil, nil, "", err
		}
		return nil, nil, fmt.Sprintf("Proxmox VE hypervisor %s (%s) was not reached: %v", h.Name, redact.URL(h.Proxmox.URL), err), nil
	}
	tm, ok := drv.(Templater)
	if !ok {
		_ = drivers.Close(drv)
		return nil, nil, "", fmt.Errorf("hypervisor %s cannot hold image-builder templates", img.Hypervisor)
	}
	return drv, tm, "", nil
}

// diskFormat is image-builder's disk_format for the node's VM storage,
// from the storage's type on the API.
func diskFormat(ctx context.Context, tm Templater, node, storage string) (string, error) {
	list, err := tm.Storages(ctx, node)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(list, func(s proxmox.Storage) bool { return s.Name == storage })
	if i < 0 {
		return "", fmt.Errorf("node %s has no storage %q (lab.yaml hypervisors[].proxmox.nodes[].storage); 'labctl doctor' lists what it has", node, storage)
	}
	return list[i].DiskFormat(), nil
}

// find returns the template carrying all tags, or nil.
func find(ctx context.Context, tm Templater, tags []string) (*hypervisor.VM, error) {
	ts, err := tm.Templates(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if !slices.ContainsFunc(tags, func(x string) bool { return !slices.Contains(t.Tags, x) }) {
			return &t, nil
		}
	}
	return nil, nil
}

// named lists the templates on node called name.
func named(ctx context.Context, tm Templater, node, name string) ([]hypervisor.VM, error) {
	vms, err := tm.NodeTemplates(ctx, node)
	if err != nil {
		return nil, err
	}
	var out []hypervisor.VM
	for _, v := range vms {
		if v.Name == name {
			out = append(out, v)
		}
	}
	return out, nil
}

// untagged is the one template called name on node that an earlier build
// left untagged, or nil. Several are an error: labctl cannot tell which
// one to keep.
func untagged(ctx context.Context, tm Templater, node, name string) (*hypervisor.VM, error) {
	ts, err := named(ctx, tm, node, name)
	if err != nil || len(ts) == 0 {
		return nil, err
	}
	if len(ts) > 1 {
		return nil, fmt.Errorf("node %s has %d templates named %s (VMIDs %s) and none is tagged; delete all but one and run 'labctl image build' again to tag it", node, len(ts), name, vmids(ts))
	}
	return &ts[0], nil
}

// built finds the template a build made: the VMID Packer printed,
// checked on the API, or else the one template called name.
func built(ctx context.Context, tm Templater, node, name string, id int, log string) (int, error) {
	ts, err := named(ctx, tm, node, name)
	if err != nil {
		return 0, err
	}
	if id != 0 {
		if !slices.ContainsFunc(ts, func(v hypervisor.VM) bool { return v.ID == id }) {
			return 0, &BuildError{Err: fmt.Errorf("packer reported template %d, but node %s has no template %d named %s", id, node, id, name), Log: log}
		}
		return id, nil
	}
	if len(ts) != 1 {
		return 0, &BuildError{Err: fmt.Errorf("packer printed no template VMID and node %s has %d templates named %s (%s)", node, len(ts), name, vmids(ts)), Log: log}
	}
	return ts[0].ID, nil
}

func vmids(vms []hypervisor.VM) string {
	ids := make([]string, 0, len(vms))
	for _, v := range vms {
		ids = append(ids, strconv.Itoa(v.ID))
	}
	return strings.Join(ids, ", ")
}

// build writes the var file and log (0600), runs image-builder and returns
// the template's VMID as Packer printed it, or 0 when it printed none.
func (p *plan) build(ctx context.Context) (int, error) {
	// Under sudo these go in the invoking user's state folder, as theirs.
	if err := userhome.MkdirAll(filepath.Dir(p.varFile), 0o700); err != nil {
		return 0, err
	}
	data, err := json.MarshalIndent(p.vars, "", "  ")
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(p.varFile, p.sc.Bytes(append(data, '\n')), 0o600); err != nil {
		return 0, fmt.Errorf("writing the Packer variable file: %w", err)
	}
	if err := userhome.Own(p.varFile); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("creating the build log: %w", err)
	}
	if err := userhome.Own(p.logPath); err != nil {
		f.Close()
		return 0, err
	}
	defer f.Close()
	id, err := run(ctx, p.dir, p.target, p.childEnv, p.sc, f, p.logPath, func(msg string) {
		step.Progress(ctx, "%s", msg)
	})
	if err != nil || id == "" {
		return 0, err
	}
	// The proxmox builder's artifact id is the VMID; accept node:vmid too.
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		id = id[i+1:]
	}
	n, err := strconv.Atoi(id)
	if err != nil || n <= 0 {
		return 0, &BuildError{Err: fmt.Errorf("packer's artifact id %q is not a VMID", id), Log: p.logPath}
	}
	return n, nil
}
