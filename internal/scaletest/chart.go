package scaletest

import (
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// CheckChart refuses a chart file WriteChart cannot write, so that
// scale-test refuses it before the test rather than after: the wrong
// extension, a folder that is missing or no folder, and (unless dryRun,
// which changes nothing) a folder labctl cannot create a file in.
func CheckChart(path string, dryRun bool) error {
	if err := chartExt(path); err != nil {
		return err
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--chart %q: is a folder; name a file in it, e.g. %s", path, filepath.Join(path, "chart.svg"))
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--chart %q: the folder %s does not exist; create it or name a file in an existing folder", path, dir)
	case err != nil:
		return fmt.Errorf("--chart %q: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("--chart %q: %s is not a folder; name a file in an existing folder", path, dir)
	case dryRun:
		return nil
	}
	// Permission bits do not tell (root, ACLs, a read-only mount): a file
	// made and removed again does.
	f, err := os.CreateTemp(dir, ".labctl-chart-*")
	if err != nil {
		return fmt.Errorf("--chart %q: cannot write in the folder %s (%w); name a file in a folder you can write to", path, dir, errors.Unwrap(err))
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("--chart %q: remove the test file labctl made: %w", path, err)
	}
	return nil
}

// chartExt refuses a file name whose extension picks no chart format.
func chartExt(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".svg" && ext != ".png" {
		return fmt.Errorf("--chart %q: the file must end in .svg or .png", path)
	}
	return nil
}

// WriteChart draws worker Nodes, pending pods and MachineDeployment
// replicas over time as step lines and writes path; the extension picks
// SVG or PNG.
func WriteChart(path, cluster string, samples []Sample) error {
	if err := chartExt(path); err != nil {
		return err
	}
	if len(samples) == 0 {
		return fmt.Errorf("chart %s: nothing was recorded", path)
	}
	p := plot.New()
	p.Title.Text = "labctl scale-test " + cluster
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "count"
	p.Add(plotter.NewGrid())
	t0 := samples[0].At
	series := []struct {
		name  string
		color color.Color
		value func(Sample) float64
	}{
		{"worker Nodes", color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, func(s Sample) float64 { return float64(s.Nodes) }},
		{"pending pods", color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, func(s Sample) float64 { return float64(s.Pending) }},
		{"MachineDeployment replicas", color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, func(s Sample) float64 { return float64(s.MDReplicas) }},
	}
	for _, s := range series {
		pts := make(plotter.XYs, len(samples))
		for i, smp := range samples {
			pts[i].X = smp.At.Sub(t0).Seconds()
			pts[i].Y = s.value(smp)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = s.color
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.Top = true
	if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("writing chart %s: %w", path, err)
	}
	return nil
}
