package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

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
	// Output, when set, is the file the command's output goes to. It is
	// never read as the config: 'labctl config view > lab.yaml' has the
	// shell empty ./lab.yaml before labctl starts.
	Output fs.FileInfo
}

// MaxSize bounds a lab config. The owner's lab is 3 KiB; 4 MiB leaves room
// for any real lab, and keeps '-c /dev/zero' or a runaway pipe from reading
// until memory runs out.
const MaxSize = 4 << 20

// Load reads, defaults and validates a lab config. ctx ends the wait: a
// FIFO with no writer, or stdin that never closes, blocks in the kernel,
// so the read runs on its own goroutine and Load returns as soon as ctx is
// done (the process is then on its way out; the blocked read goes with it).
func Load(ctx context.Context, req Request) (*Lab, Source, error) {
	type result struct {
		lab *Lab
		src Source
		err error
	}
	done := make(chan result, 1)
	go func() {
		data, src, err := read(req)
		if err != nil {
			done <- result{nil, src, err}
			return
		}
		lab, err := Parse(src.Name, data)
		done <- result{lab, src, err}
	}()
	select {
	case r := <-done:
		return r.lab, r.src, r.err
	case <-ctx.Done():
		src := requested(req)
		return nil, src, fmt.Errorf("reading lab config %s: %w", src, context.Cause(ctx))
	}
}

// requested is the source req names, before anything is read.
func requested(req Request) Source {
	switch {
	case req.Path == "-":
		return Source{Name: "stdin"}
	case req.Path == "":
		return Source{Name: DefaultPath}
	}
	return Source{Name: req.Path}
}

func read(req Request) ([]byte, Source, error) {
	if req.Path == "-" {
		src := Source{Name: "stdin"}
		if req.Stdin == nil {
			return nil, src, errors.New("reading lab config from stdin: no input")
		}
		data, err := readBounded(req.Stdin, src.Name)
		if err != nil {
			return nil, src, fmt.Errorf("reading lab config from stdin: %w", err)
		}
		return data, src, nil
	}
	src := requested(req)
	f, err := os.Open(src.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !req.Explicit:
		data, err := embedded.FS.ReadFile(builtinExample)
		return data, Source{Name: "built-in local-kvm example", BuiltIn: true}, err
	case errors.Is(err, fs.ErrNotExist):
		return nil, src, fmt.Errorf("lab config %s does not exist; run 'labctl config init -c %s' to write one", src, src)
	case err != nil:
		return nil, src, fmt.Errorf("reading lab config: %w", err)
	}
	defer f.Close()
	if req.Output != nil {
		// With or without -c: printing the built-in lab into the user's
		// lab.yaml would replace their lab without a word.
		if fi, err := f.Stat(); err == nil && os.SameFile(fi, req.Output) {
			return nil, src, fmt.Errorf("lab config %s is the file the output is redirected into, which the shell emptied before labctl started (restore it from your editor or backup if it held your lab); "+
				"redirect into another file, e.g. 'labctl config view > lab.full.yaml', and 'labctl config init --local' writes the built-in lab", src)
		}
	}
	data, err := readBounded(f, src.Name)
	if err != nil {
		return nil, src, fmt.Errorf("reading lab config: %w", err)
	}
	return data, src, nil
}

// readBounded reads r to its end, or fails once it passes MaxSize.
func readBounded(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s is larger than %d MiB; a lab config is a few KiB, so check that -c names the right file", name, MaxSize>>20)
	}
	return data, nil
}

// Parse decodes, defaults and validates one lab document. file names it in
// errors.
func Parse(file string, data []byte) (*Lab, error) {
	f, lines, shape, err := decode(file, data)
	if err != nil {
		return nil, err
	}
	pins, err := versions.Get()
	if err != nil {
		return nil, err
	}
	lab, forms := convert(f)
	for _, e := range forms {
		// Problems of the file's form are like the decoder's: validation
		// sees the field as left out and says nothing more of it.
		e.File = file
		e.Line, e.absent = lines.lookup(e.Field)
		shape = shape.collect(e)
	}
	SetDefaults(lab, pins)
	// Every problem in file order, the decoder's and validation's
	// together. A field absent from the file has no line of its own:
	// one that only the document as a whole could hold comes last.
	errs := shape
	for _, e := range Validate(lab) {
		if reported(shape, e.Field) {
			continue // the field was taken out for a problem already named
		}
		e.File = file
		if e.more == 0 {
			e.Line, e.absent = lines.lookup(e.Field)
		}
		errs = errs.collect(e)
	}
	errs.sortByLine()
	if len(errs) > 0 {
		return nil, errs.capped()
	}
	return lab, nil
}

// reported is true when field, or a field it sits in, has a problem in
// shape: validation then sees it left out and would only repeat it.
func reported(shape ErrorList, field string) bool {
	under := func(parent string) bool {
		return parent != "" && (field == parent || strings.HasPrefix(field, parent+".") || strings.HasPrefix(field, parent+"["))
	}
	for _, e := range shape {
		if under(e.Field) || under(e.covers) {
			return true
		}
	}
	return false
}

// Marshal writes a lab as lab.yaml (FileOf), YAML that Parse reads back
// to the same lab.
func Marshal(lab *Lab) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(FileOf(lab)); err != nil {
		return nil, fmt.Errorf("writing lab config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("writing lab config: %w", err)
	}
	return buf.Bytes(), nil
}
