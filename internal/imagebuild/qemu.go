package imagebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/userhome"
	"github.com/labctl/labctl/internal/versions"
)

// An image on libvirt hosts is built once, here, by image-builder's QEMU
// target into a qcow2, and then uploaded into each host's storage pool
// as the volume config.Image.VolumeName. labctl names the output itself
// (output_directory and vm_name in the variable file), so it knows where
// the qcow2 lands whatever Packer prints; once make succeeded it writes
// the file's sha256 beside it (<qcow2>.sha256, sha256sum's format): a
// qcow2 without one is the leftover of a build that did not finish.
// A host holds the image when its pool has the volume and the
// verified-upload marker "<volume>.sha256-<hex>" of this qcow2, written
// only after the volume was read back and hashed (the marker the libvirt
// provider's FindImage asks for), and the volume is as long as the file.

// qemuPlan is one libvirt image's build and uploads, worked out first.
type qemuPlan struct {
	dir, target, varFile, logPath string
	vars                          map[string]string
	childEnv                      []string
	// outDir is Packer's output_directory and disk the qcow2 in it.
	outDir, disk string
	volume       string
	hosts        []string
}

func prepareQEMU(o BuildOptions, lab *config.Lab, img config.Image, pins versions.Pins) (*qemuPlan, error) {
	vars, err := qemuVars(img)
	if err != nil {
		return nil, err
	}
	dir, err := o.builderDir(img, pins, "qemu")
	if err != nil {
		return nil, err
	}
	folder, err := files.StatePath(lab.Metadata.Name, "images")
	if err != nil {
		return nil, err
	}
	p := &qemuPlan{
		dir: dir, target: QEMUTarget(img), vars: vars, volume: img.VolumeName(), hosts: img.Hosts,
		varFile: filepath.Join(folder, img.Name+".vars.json"),
		logPath: filepath.Join(folder, img.Name+"-"+time.Now().UTC().Format("20060102T150405Z")+".log"),
		// image-builder's own place for QEMU output (./output/<name>),
		// absolute so that it does not depend on make's folder.
		outDir: filepath.Join(dir, "output", TemplateName(img)),
	}
	p.disk = filepath.Join(p.outDir, p.volume)
	p.vars["output_directory"], p.vars["vm_name"] = p.outDir, p.volume
	p.childEnv = childEnviron(o.Environ, dir, nil, p.varFile)
	return p, nil
}

// qemuVars is the variable file for img's QEMU build: image-builder's
// names (packer/qemu/packer.json.tmpl), to which prepareQEMU adds where
// the qcow2 goes.
func qemuVars(img config.Image) (map[string]string, error) {
	m := semverRe.FindStringSubmatch(img.KubernetesVersion)
	if m == nil {
		return nil, fmt.Errorf("image %s: kubernetesVersion %q is not vMAJOR.MINOR.PATCH", img.Name, img.KubernetesVersion)
	}
	return map[string]string{
		"kubernetes_semver":      img.KubernetesVersion,
		"kubernetes_series":      "v" + m[1] + "." + m[2],
		"kubernetes_deb_version": m[1] + "." + m[2] + "." + m[3] + "-1.1",
		"artifact_name":          TemplateName(img),
		"format":                 "qcow2",
	}, nil
}

// show prints the dry run's var file and command on stdout.
func (p *qemuPlan) show(w io.Writer) error {
	data, err := json.MarshalIndent(p.vars, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "# variable file %s\n%s\n# command\ncd %s && PACKER_VAR_FILES=%s make %s\n# output\n%s, uploaded as volume %s to %s\n",
		p.varFile, data, p.dir, p.varFile, p.target, p.disk, p.volume, strings.Join(p.hosts, ", "))
	return err
}

// built is the finished qcow2 of an earlier run, or ok false.
func (p *qemuPlan) built() (libvirt.LocalImage, bool, error) {
	data, err := os.ReadFile(p.disk + ".sha256")
	if errors.Is(err, os.ErrNotExist) {
		return libvirt.LocalImage{}, false, nil
	}
	if err != nil {
		return libvirt.LocalImage{}, false, err
	}
	st, err := os.Stat(p.disk)
	if err != nil {
		// The sum without its qcow2: treat as not built.
		return libvirt.LocalImage{}, false, nil
	}
	sum, _, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	return libvirt.LocalImage{Path: p.disk, Volume: p.volume, SHA256: sum, Size: st.Size()}, true, nil
}

// qemuArtifactRe is the human UI line of the QEMU builder's artifact
// (packer v1.9.5 command/build.go "--> NAME: " + String();
// packer-plugin-qemu v1.1.4 builder/qemu/artifact.go "VM files in
// directory: <output_directory>").
var qemuArtifactRe = regexp.MustCompile(`^--> .+: VM files in directory: (.+?)\s*$`)

// QEMUArtifactDir returns the output directory of a colour-stripped QEMU
// artifact line.
func QEMUArtifactDir(line string) (string, bool) {
	m := qemuArtifactRe.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// build runs make and records the qcow2's sha256 beside it.
func (p *qemuPlan) build(ctx context.Context) (libvirt.LocalImage, error) {
	// Packer refuses an existing output_directory; one without a
	// finished qcow2 is the leftover of a build that was killed.
	if err := os.RemoveAll(p.outDir); err != nil {
		return libvirt.LocalImage{}, fmt.Errorf("removing the unfinished output of an earlier build: %w", err)
	}
	if err := userhome.MkdirAll(filepath.Dir(p.varFile), 0o700); err != nil {
		return libvirt.LocalImage{}, err
	}
	data, err := json.MarshalIndent(p.vars, "", "  ")
	if err != nil {
		return libvirt.LocalImage{}, err
	}
	if err := os.WriteFile(p.varFile, append(data, '\n'), 0o600); err != nil {
		return libvirt.LocalImage{}, fmt.Errorf("writing the Packer variable file: %w", err)
	}
	if err := userhome.Own(p.varFile); err != nil {
		return libvirt.LocalImage{}, err
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return libvirt.LocalImage{}, fmt.Errorf("creating the build log: %w", err)
	}
	defer f.Close()
	if err := userhome.Own(p.logPath); err != nil {
		return libvirt.LocalImage{}, err
	}
	dir, err := run(ctx, p.dir, p.target, p.childEnv, NewScrubber(), f, p.logPath, func(msg string) {
		step.Progress(ctx, "%s", msg)
	})
	if err != nil {
		return libvirt.LocalImage{}, err
	}
	if filepath.IsAbs(dir) && filepath.Clean(dir) != p.outDir {
		return libvirt.LocalImage{}, &BuildError{Err: fmt.Errorf("packer reported its output in %s, but labctl set output_directory %s", dir, p.outDir), Log: p.logPath}
	}
	if _, err := os.Stat(p.disk); err != nil {
		return libvirt.LocalImage{}, &BuildError{Err: fmt.Errorf("image-builder succeeded but left no %s: %w", p.disk, err), Log: p.logPath}
	}
	sum, size, err := libvirt.FileSHA256(ctx, p.disk)
	if err != nil {
		return libvirt.LocalImage{}, err
	}
	if err := os.WriteFile(p.disk+".sha256", []byte(sum+"  "+p.volume+"\n"), 0o644); err != nil {
		return libvirt.LocalImage{}, fmt.Errorf("recording the image's sha256: %w", err)
	}
	return libvirt.LocalImage{Path: p.disk, Volume: p.volume, SHA256: sum, Size: size}, nil
}

// volumeHost is what an upload needs of a libvirt driver.
type volumeHost interface {
	CheckVolume(ctx context.Context, img libvirt.LocalImage, verify bool) (libvirt.VolumeCheck, error)
	PutVolume(ctx context.Context, img libvirt.LocalImage, progress func(what string, done int64)) error
}

func buildQEMU(ctx context.Context, o BuildOptions, lab *config.Lab, img config.Image, pins versions.Pins) error {
	p, err := prepareQEMU(o, lab, img, pins)
	if err != nil {
		return err
	}
	if o.DryRun {
		if err := p.show(o.IO.Out); err != nil {
			return err
		}
	}
	var local libvirt.LocalImage
	have, done, err := p.built()
	if err != nil {
		return err
	}
	if done {
		local = have
	}
	r := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	steps := []step.Step{
		{
			Name: "prerequisites",
			Plan: func(ctx context.Context) ([]string, error) {
				return nil, qemuBuildPrereqs(ctx, lookupPath(p.childEnv), pins.Packer)
			},
		},
		{
			Name: "build " + img.Name,
			Plan: func(ctx context.Context) ([]string, error) {
				if done {
					return nil, nil
				}
				what := fmt.Sprintf("run make %s in %s (Kubernetes %s) into %s", p.target, p.dir, img.KubernetesVersion, p.disk)
				if _, err := os.Stat(p.outDir); err == nil {
					what = fmt.Sprintf("remove %s, the unfinished output of an earlier build, and ", p.outDir) + what
				}
				return []string{what}, nil
			},
			Apply: func(ctx context.Context) error {
				var err error
				local, err = p.build(ctx)
				return err
			},
		},
	}
	if err := r.Run(ctx, steps); err != nil {
		return err
	}
	// Each host on its own: one that does not answer does not keep the
	// image from the others, and the error names every host that failed.
	var errs []error
	for _, host := range p.hosts {
		if err := ctx.Err(); err != nil {
			return err
		}
		s, done := uploadStep(o, lab, host, p, &local)
		err := r.Run(ctx, []step.Step{s})
		done()
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, fmt.Errorf("host %s: %w", host, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !o.DryRun {
		fmt.Fprintf(o.IO.Err, "volume %s (sha256 %s) on %s\n", p.volume, local.SHA256, strings.Join(p.hosts, ", "))
	}
	return nil
}

// uploadStep puts the qcow2 into host's pool unless it holds it already;
// done closes the connection it opened.
func uploadStep(o BuildOptions, lab *config.Lab, host string, p *qemuPlan, local *libvirt.LocalImage) (s step.Step, done func()) {
	var drv hypervisor.Driver
	var vh volumeHost
	open := func(ctx context.Context) error {
		if vh != nil {
			return nil
		}
		d, err := o.Driver(ctx, host)
		if err != nil {
			return err
		}
		h, ok := d.(volumeHost)
		if !ok {
			_ = drivers.Close(d)
			return fmt.Errorf("hypervisor %s takes no volume uploads", host)
		}
		drv, vh = d, h
		return nil
	}
	pool := ""
	if h, err := lab.Hypervisor(host); err == nil && h.Libvirt != nil {
		pool = h.Libvirt.StoragePool
	}
	done = func() {
		if drv != nil {
			_ = drivers.Close(drv)
		}
	}
	return step.Step{
		Name: fmt.Sprintf("upload %s to %s", p.volume, host),
		Plan: func(ctx context.Context) ([]string, error) {
			if err := open(ctx); err != nil {
				return nil, err
			}
			if local.Path == "" {
				// A dry run before the build: the pool must be there, but
				// there is nothing to compare yet.
				if _, err := vh.CheckVolume(ctx, libvirt.LocalImage{Volume: p.volume}, false); err != nil {
					return nil, err
				}
				return []string{fmt.Sprintf("upload the new build as volume %s into pool %s", p.volume, pool)}, nil
			}
			c, err := vh.CheckVolume(ctx, *local, o.Verify)
			if err != nil {
				return nil, err
			}
			if c.State == libvirt.VolumeCurrent {
				return nil, nil
			}
			if c.Available+c.Physical < uint64(local.Size) {
				return nil, fmt.Errorf("no room: pool %s has %s free, and the image needs %s; free space in the pool, or set hypervisors[%s].libvirt.storagePool to a pool with room", pool, byteSize(int64(c.Available+c.Physical)), byteSize(local.Size), host)
			}
			what := fmt.Sprintf("upload %s (%s) into pool %s as volume %s, read it back and check its sha256", local.Path, byteSize(local.Size), pool, p.volume)
			if c.State == libvirt.VolumeIncomplete {
				what = fmt.Sprintf("replace volume %s, since %s: ", p.volume, c.Why) + what
			}
			return []string{what}, nil
		},
		Apply: func(ctx context.Context) error {
			start, phase := time.Now(), ""
			return vh.PutVolume(ctx, *local, func(what string, done int64) {
				if what != phase {
					start, phase = time.Now(), what
				}
				step.Progress(ctx, "%s: %s of %s (%d%%), %s/s", what, byteSize(done), byteSize(local.Size), pct(done, local.Size), byteSize(rate(done, time.Since(start))))
			})
		},
	}, done
}

// byteSize is n in MiB or GiB, as a progress line shows it.
func byteSize(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func pct(n, of int64) int64 {
	if of <= 0 {
		return 100
	}
	return n * 100 / of
}

func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}

// lookupPath is the PATH of env.
func lookupPath(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return ""
}

// qemuPrereqs are the tools Packer's QEMU builder runs on this machine
// (packer-plugin-qemu's driver looks both up on PATH).
// qemuBuildPrereqs is what a QEMU build needs: image-builder's tools,
// installed by its deps-qemu target, and QEMU's own.
func qemuBuildPrereqs(ctx context.Context, path, packerPin string) error {
	return errors.Join(Prereqs(ctx, path, packerPin, "deps-qemu"), qemuPrereqs(path))
}

func qemuPrereqs(path string) error {
	var errs []error
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, ok := lookPath(path, tool); !ok {
			errs = append(errs, fmt.Errorf("%s not found on PATH: Packer's QEMU builder runs it; install qemu (apt install qemu-system-x86 qemu-utils)", tool))
		}
	}
	return errors.Join(errs...)
}
