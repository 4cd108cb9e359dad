package upstream

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
	"sigs.k8s.io/yaml"
)

// Release is a provider's release assets as the project's release target
// makes them: the components file (its release kustomization built, with
// the manager's image set to the released image at the module's version,
// clusterctl's ${VAR} placeholders left for clusterctl or the operator to
// fill) and the module's clusterctl metadata.yaml.
type Release struct {
	Provider Provider
	Module   Module
	// Components is <type>-components.yaml.
	Components []byte
	// Metadata is metadata.yaml.
	Metadata []byte
}

// ReleaseOf builds the named provider's release assets from its module.
func ReleaseOf(ctx context.Context, root, name string) (*Release, error) {
	c, err := Get(ctx, root, name)
	if err != nil {
		return nil, err
	}
	p := c.Provider
	if p.Image == "" {
		return nil, fmt.Errorf("%s has no release image", name)
	}
	md, err := os.ReadFile(filepath.Join(c.Module.Dir, filepath.FromSlash(cmp.Or(p.Metadata, "metadata.yaml"))))
	if err != nil {
		return nil, fmt.Errorf("%s: reading its clusterctl metadata: %w", name, err)
	}
	if p.ReleaseFile != "" {
		comps, err := os.ReadFile(filepath.Join(c.Module.Dir, filepath.FromSlash(p.ReleaseFile)))
		if err != nil {
			return nil, fmt.Errorf("%s: reading its release components: %w", name, err)
		}
		return &Release{Provider: p, Module: c.Module, Components: comps, Metadata: md}, nil
	}
	image := p.Image + ":" + c.Module.Version
	var docs [][]byte
	for _, o := range c.Objects {
		o = o.DeepCopy()
		if o.GetKind() == "Deployment" {
			if err := setManagerImage(o, image); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		docs = append(docs, data)
	}
	var comps []byte
	for i, d := range docs {
		if i > 0 {
			comps = append(comps, "---\n"...)
		}
		comps = append(comps, d...)
	}
	return &Release{Provider: p, Module: c.Module, Components: comps, Metadata: md}, nil
}

// setManagerImage sets the image of the container called manager, as the
// release targets' 'kustomize edit set image' (or manager_image_patch.yaml
// rewrite) do.
func setManagerImage(d *unstructured.Unstructured, image string) error {
	cs, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	set := false
	for i, c := range cs {
		m, _ := c.(map[string]any)
		if m["name"] == "manager" {
			m["image"] = image
			cs[i], set = m, true
		}
	}
	if !set {
		return fmt.Errorf("Deployment %s has no container named manager", d.GetName())
	}
	return unstructured.SetNestedSlice(d.Object, cs, "spec", "template", "spec", "containers")
}

// Substitute fills the components' ${VAR} placeholders as clusterctl
// does, with clusterctl's own processor: from vars, else each
// placeholder's default; a variable with neither is an error naming it.
func (r *Release) Substitute(vars map[string]string) ([]byte, error) {
	out, err := yamlprocessor.NewSimpleProcessor().Process(r.Components, func(k string) (string, error) {
		if v, ok := vars[k]; ok {
			return v, nil
		}
		return "", fmt.Errorf("variable %s is not set", k)
	})
	if err != nil {
		return nil, fmt.Errorf("%s components: %w", r.Provider.Name, err)
	}
	return out, nil
}

// Variables are the components' ${VAR} placeholders without a default:
// what clusterctl (or the operator, from the Provider's configSecret) must
// be given.
func (r *Release) Variables() ([]string, error) {
	m, err := yamlprocessor.NewSimpleProcessor().GetVariableMap(r.Components)
	if err != nil {
		return nil, err
	}
	var out []string
	for k, def := range m {
		if def == nil {
			out = append(out, k)
		}
	}
	return out, nil
}
