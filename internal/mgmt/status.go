package mgmt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// StatusOptions are the inputs of Status.
type StatusOptions struct {
	IO      *ui.IO
	Lab     *config.Lab
	Mgmt    func(ctx context.Context) (*kube.Client, error)
	Output  string // text, json or yaml
	Verbose int
}

// Report is what 'mgmt status' prints; -o json prints it whole.
type Report struct {
	Server string `json:"server"`
	// Charts is how the charts are installed there: helm-controller or
	// helm-sdk.
	Charts     string            `json:"charts"`
	Ready      bool              `json:"ready"`
	Components []ComponentStatus `json:"components"`
}

// statusTimeout bounds reading the whole stack back.
const statusTimeout = 30 * time.Second

// ErrNotReady means some component is not ready; the report says which.
var ErrNotReady = errors.New("the management stack is not ready")

// Status reads every component of the stack back from the cluster and
// prints a table (or JSON/YAML). It returns ErrNotReady when any
// component is not ready. It only reads, and needs no secret.
func Status(ctx context.Context, o StatusOptions) (*Report, error) {
	r, err := ReadStatus(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := o.IO.Print(o.Output, r, func(w io.Writer) error { return WriteStatus(o.IO, w, r) }); err != nil {
		return r, err
	}
	if !r.Ready {
		return r, ErrNotReady
	}
	return r, nil
}

// ReadStatus reads every component of the stack back from the cluster,
// as Status does, and prints nothing: 'labctl status' shows the same
// report in its own screen.
func ReadStatus(ctx context.Context, o StatusOptions) (*Report, error) {
	comps, err := components.Build(o.Lab, versions.MustGet(), components.Options{IgnoreOffline: true, LocalFiles: components.SkipLocalFiles})
	if err != nil {
		return nil, err
	}
	kc, err := o.Mgmt(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	mode, err := detectMode(ctx, kc, Auto)
	if err != nil {
		return nil, fmt.Errorf("reading the management stack from %s: %w", kc.Host(), err)
	}
	hc := newHelm(kc, o.IO, o.Verbose)
	r := &Report{Server: kc.Host(), Charts: string(mode), Ready: true}
	for i := range comps {
		c := &comps[i]
		var st ComponentStatus
		switch c.Install {
		case components.ChartInstall:
			st, err = chartStatus(ctx, kc, hc, mode, c)
		case components.ProviderInstall:
			st, err = providerStatus(ctx, kc, c)
		default:
			st, err = manifestStatus(ctx, kc, c)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s from %s: %w", c.Name, kc.Host(), err)
		}
		r.Components = append(r.Components, st)
		r.Ready = r.Ready && st.Ready
	}
	return r, nil
}

// WriteStatus prints r as the table of 'mgmt status'.
func WriteStatus(s *ui.IO, w io.Writer, r *Report) error {
	st := s.Styles(w)
	rows := make([][]string, 0, len(r.Components))
	for _, c := range r.Components {
		ready := st.Success.Render("yes")
		if !c.Ready {
			ready = st.Failure.Render("no")
		}
		installed := c.Installed
		if installed == "" {
			installed = "-"
		}
		rows = append(rows, []string{c.Name, c.Wanted, installed, ready, c.Reason})
	}
	return s.Table(w, []string{"COMPONENT", "WANTED", "INSTALLED", "READY", "REASON"}, rows)
}

func providerStatus(ctx context.Context, kc *kube.Client, c *components.Component) (ComponentStatus, error) {
	p := c.Provider
	out := ComponentStatus{Name: c.Name, Install: "cluster-api-operator Provider", Wanted: p.Version}
	obj, found, err := kc.Get(ctx, p.Ref())
	if err != nil {
		return out, err
	}
	if !found {
		out.Reason = p.Ref().String() + " does not exist"
		return out, nil
	}
	out.Installed, _, _ = unstructured.NestedString(obj.Object, "status", "installedVersion")
	ok, now := kube.ProviderReady(p.Version).Check(obj)
	out.Ready, out.Reason = ok, now
	return out, nil
}

// manifestStatus says whether labctl's manifests are on the cluster as
// labctl would apply them now.
func manifestStatus(ctx context.Context, kc *kube.Client, c *components.Component) (ComponentStatus, error) {
	out := ComponentStatus{Name: c.Name, Install: "manifests", Wanted: c.Version}
	cs, err := kc.Plan(ctx, c.Objects)
	if err != nil {
		return out, err
	}
	var missing, differ []string
	for _, ch := range cs {
		switch ch.Action {
		case kube.Create:
			missing = append(missing, ch.Ref.String())
		case kube.Update:
			differ = append(differ, ch.Ref.String())
		}
	}
	switch {
	case len(missing) == len(cs):
		out.Reason = "not installed"
	case len(missing) > 0:
		out.Reason = "missing " + strings.Join(missing, ", ")
	default:
		// Every object exists; the version is the one labctl stamped.
		for _, o := range c.Objects {
			if live, found, err := kc.Get(ctx, kube.RefOf(o)); err == nil && found {
				out.Installed = live.GetLabels()["app.kubernetes.io/version"]
				if out.Installed != "" {
					break
				}
			}
		}
		if len(differ) > 0 {
			out.Reason = "differs from what labctl applies: " + strings.Join(differ, ", ")
		}
	}
	out.Ready = out.Reason == ""
	return out, nil
}
