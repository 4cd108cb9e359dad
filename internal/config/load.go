package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/versions"
)

// DefaultPath is where labctl looks for a lab config when none is named.
const DefaultPath = "./lab.yaml"

// builtinExample is the embedded lab used when no lab.yaml exists.
const builtinExample = "examples/local-kvm.yaml"

// Source says where a config came from.
type Source struct {
	// Name is the file path, "stdin", or "built-in local-kvm example".
	Name    string
	BuiltIn bool
}

func (s Source) String() string { return s.Name }

// Request says which config to load.
type Request struct {
	// Path is a file, or "-" for Stdin.
	Path string
	// Explicit is true when the user named Path (flag or LABCTL_CONFIG);
	// then a missing file is an error instead of falling back to the
	// built-in example.
	Explicit bool
	Stdin    io.Reader
}

// Load reads, defaults and validates a lab config.
func Load(req Request) (*Lab, Source, error) {
	data, src, err := read(req)
	if err != nil {
		return nil, src, err
	}
	lab, err := Parse(src.Name, data)
	return lab, src, err
}

func read(req Request) ([]byte, Source, error) {
	if req.Path == "-" {
		if req.Stdin == nil {
			return nil, Source{Name: "stdin"}, errors.New("reading lab config from stdin: no input")
		}
		data, err := io.ReadAll(req.Stdin)
		if err != nil {
			return nil, Source{Name: "stdin"}, fmt.Errorf("reading lab config from stdin: %w", err)
		}
		return data, Source{Name: "stdin"}, nil
	}
	path := req.Path
	if path == "" {
		path = DefaultPath
	}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		return data, Source{Name: path}, nil
	case errors.Is(err, fs.ErrNotExist) && !req.Explicit:
		data, err := embedded.FS.ReadFile(builtinExample)
		return data, Source{Name: "built-in local-kvm example", BuiltIn: true}, err
	case errors.Is(err, fs.ErrNotExist):
		return nil, Source{Name: path}, fmt.Errorf("lab config %s does not exist; run 'labctl config init -c %s' to write one", path, path)
	}
	return nil, Source{Name: path}, fmt.Errorf("reading lab config: %w", err)
}

// Parse decodes, defaults and validates one lab document. file names it in
// errors.
func Parse(file string, data []byte) (*Lab, error) {
	lab, lines, err := decode(file, data)
	if err != nil {
		return nil, err
	}
	pins, err := versions.Get()
	if err != nil {
		return nil, err
	}
	SetDefaults(lab, pins)
	if errs := Validate(lab); len(errs) > 0 {
		for _, e := range errs {
			e.File = file
			e.Line = lines.lookup(e.Field)
		}
		errs.sortByLine()
		return nil, errs
	}
	return lab, nil
}

// Marshal writes a lab as YAML that Parse reads back to the same lab.
func Marshal(lab *Lab) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(lab); err != nil {
		return nil, fmt.Errorf("writing lab config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("writing lab config: %w", err)
	}
	return buf.Bytes(), nil
}
