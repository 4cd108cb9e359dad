package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lines maps a field path to the line it is written on.
type lines map[string]int

// lookup finds the line of path, or of its nearest written parent, or
// else of the document (the "" entry): every error points somewhere.
// document is true in that last case: nothing on the path is written.
func (ls lines) lookup(path string) (line int, document bool) {
	for path != "" {
		if n, ok := ls[path]; ok {
			return n, false
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return ls[""], true
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// decode reads one lab document strictly: unknown fields, wrong types and
// inline secrets are errors that name their field and line.
//
// Problems of shape (unknown fields, wrong types, pasted secrets) come back
// as shape, with the lab decoded without the fields they name, so that
// validation can report its own problems beside them.
func decode(file string, data []byte) (*File, lines, ErrorList, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		msg := "the config is empty; run 'labctl config init' to write a starter lab.yaml"
		if file != "stdin" && file != "" {
			// Usually the shell made it: 'labctl ... > lab.yaml' empties the
			// file before labctl runs, and then every command trips on it.
			msg = fmt.Sprintf("the config is empty (%d bytes, no YAML); run 'labctl config init --force -c %s' to write a starter lab.yaml, or delete the empty file to use the built-in lab", len(data), file)
		}
		return nil, nil, nil, ErrorList{{File: file, Msg: msg}}
	}
	// One decoder reads the lab and then looks for a second document, so
	// the file is parsed once.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, nil, parseError(file, data, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil, nil, ErrorList{{File: file, Msg: "the config has no YAML document; run 'labctl config init' to write a starter lab.yaml"}}
	}
	if err := oneDocument(file, data, dec); err != nil {
		return nil, nil, nil, err
	}
	root := doc.Content[0]
	// Aliases let a short file name a huge tree; a budget of visits keeps
	// the walk linear in the size of the file.
	w := walker{file: file, lines: lines{"": root.Line}, budget: 8*len(data) + 10000}
	w.walk(root, reflect.TypeOf(File{}), "")
	if w.budget < 0 {
		return nil, nil, nil, w.errs.capped()
	}
	var f File
	if err := root.Decode(&f); err != nil {
		// The walk checks shapes and types first, and takes out what it
		// reports, so this is a backstop.
		if len(w.errs) > 0 {
			w.errs.sortByLine()
			return nil, nil, nil, w.errs.capped()
		}
		return nil, nil, nil, syntaxError(file, err)
	}
	// What the walk reported was taken out of the tree, so the rest is
	// decoded and validated too: config validate reports every problem at
	// once, not the unknown fields first and the others on the next run.
	return &f, w.lines, w.errs, nil
}

// oneDocument rejects a second YAML document after the lab, which dec
// has just read: decoding reads only the first and would silently drop the
// rest.
func oneDocument(file string, data []byte, dec *yaml.Decoder) error {
	var next yaml.Node
	err := dec.Decode(&next)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return parseError(file, data, err)
	case len(next.Content) == 0 || next.Content[0].Tag == "!!null":
		return nil // a trailing "---" with nothing after it
	}
	return ErrorList{{File: file, Line: next.Content[0].Line, Msg: "a second YAML document starts here; lab.yaml holds exactly one Lab, so remove the '---' and what follows or move it to its own file"}}
}

// yamlParserProblems are the messages of yaml's parser (not its scanner).
// yaml numbers their lines from 0, and leaves the line out on the first line.
var yamlParserProblems = []string{"did not find expected", "found undefined tag handle", "found duplicate %", "found incompatible YAML document"}

var unknownAnchor = regexp.MustCompile(`unknown anchor '(.*)' referenced`)

// parseError is syntaxError for errors of the YAML parser, with the line
// numbers yaml gets wrong put right.
func parseError(file string, data []byte, err error) error {
	err = syntaxError(file, err)
	l, ok := err.(ErrorList)
	if !ok || len(l) != 1 {
		return err
	}
	e := l[0]
	if m := unknownAnchor.FindStringSubmatch(e.Msg); m != nil {
		for i, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "*"+m[1]) {
				e.Line = i + 1
				break
			}
		}
		e.Msg += fmt.Sprintf("; define it with &%s before using *%s", m[1], m[1])
		e.Field = syntaxField(data, e.Line)
		return l
	}
	if strings.HasSuffix(e.Msg, "found a tab character that violates indentation") {
		// yaml names the line the scalar before the tab started on.
		for i, line := range strings.Split(string(data), "\n") {
			if i+1 >= e.Line && strings.Contains(line[:len(line)-len(strings.TrimLeft(line, " \t"))], "\t") {
				e.Line = i + 1
				e.Msg = tabMsg(e.Line)
				break
			}
		}
		e.Field = syntaxField(data, e.Line)
		return l
	}
	if strings.HasSuffix(e.Msg, "found character that cannot start any token") && e.Line > 0 {
		// yaml's scanner says this of a tab that indents a line.
		if all := strings.Split(string(data), "\n"); e.Line <= len(all) {
			line := all[e.Line-1]
			if strings.Contains(line[:len(line)-len(strings.TrimLeft(line, " \t"))], "\t") {
				e.Msg = tabMsg(e.Line)
			}
		}
		e.Field = syntaxField(data, e.Line)
		return l
	}
	for _, p := range yamlParserProblems {
		if strings.HasPrefix(e.Msg, "YAML syntax error: "+p) {
			e.Line++
			break
		}
	}
	if e.Line == 0 {
		e.Line = 1
	}
	e.Field = syntaxField(data, e.Line)
	return l
}

// tabMsg says what is wrong with a line yaml refuses for the tab in its
// indentation; yaml's own words never say "tab" plainly.
func tabMsg(line int) string {
	return fmt.Sprintf("YAML syntax error: line %d starts with a tab; YAML indents with spaces only: replace the tab with spaces", line)
}

// syntaxField names the field a YAML syntax error on line n sits in: the
// last key before that line, written left of the line's indentation, in
// the longest start of the file that still parses. "" when none is found.
func syntaxField(data []byte, n int) string {
	all := strings.Split(string(data), "\n")
	if n < 1 || n > len(all) || len(data) > 1<<20 {
		return ""
	}
	at := strings.TrimRight(all[n-1], "\r")
	indent := len(at) - len(strings.TrimLeft(at, " -"))
	for cut := n - 1; cut > 0 && cut >= n-20; cut-- {
		var doc yaml.Node
		if yaml.Unmarshal([]byte(strings.Join(all[:cut], "\n")), &doc) != nil || len(doc.Content) == 0 {
			continue
		}
		best := ""
		var visit func(node *yaml.Node, path string)
		visit = func(node *yaml.Node, path string) {
			switch node.Kind {
			case yaml.MappingNode:
				for i := 0; i+1 < len(node.Content); i += 2 {
					k := node.Content[i]
					if k.Column-1 < indent || (k.Column-1 == indent && k.Line == n) {
						best = join(path, k.Value)
					}
					visit(node.Content[i+1], join(path, k.Value))
				}
			case yaml.SequenceNode:
				for i, item := range node.Content {
					visit(item, fmt.Sprintf("%s[%d]", path, i))
				}
			}
		}
		visit(doc.Content[0], "")
		return best
	}
	return ""
}

func syntaxError(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var l ErrorList
		for _, msg := range te.Errors {
			l = append(l, lineError(file, msg))
		}
		return l
	}
	return ErrorList{lineError(file, err.Error())}
}

func lineError(file, msg string) *Error {
	e := &Error{File: file, Msg: "YAML syntax error: " + strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "YAML syntax error: " + m[2]
	}
	return e
}

type walker struct {
	file   string
	lines  lines
	errs   ErrorList
	budget int // nodes left to visit
}

// maxListEntries bounds every list in lab.yaml. A lab has a handful of
// hypervisors, DNS servers and clusters; a thousand of anything is a
// mistake or an attack, and the bound keeps validation quick.
const maxListEntries = 1000

// listNouns name what a list holds, for the error when it is too long.
var listNouns = map[string]string{
	"network.dns": "DNS servers", "hypervisors": "hypervisors", "hypervisors[].proxmox.nodes": "nodes",
	"images": "images", "clusters": "clusters", "management.sshPublicKeys": "SSH keys",
	"clusters[].pools": "pools", "clusters[].pools[].hypervisors": "hypervisors",
}

// secretsChecked are fields whose values validation checks for pasted
// secrets itself, with a message made for them; and fields where hex is
// expected.
// URL fields are checked by validation too (urls), for credentials in
// the URL and not for a UUID in its path.
var urlPaths = func() map[string]bool {
	m := map[string]bool{}
	for _, f := range urlFields(&Lab{Hypervisors: []Hypervisor{{Proxmox: &Proxmox{}, Libvirt: &Libvirt{}}}}) {
		m[index.ReplaceAllString(f.path.String(), "[]")] = true
	}
	return m
}()

var secretsChecked = map[string]bool{
	"hypervisors[].proxmox.tokenID": true, "hypervisors[].proxmox.tokenSecret.env": true,
	"hypervisors[].proxmox.tokenSecret.file": true, "hypervisors[].proxmox.tls.fingerprint": true,
	"management.image.checksum": true, "management.sshPublicKeys[]": true, "management.sshPublicKeyFile": true,
}

func (w *walker) fail(n *yaml.Node, path, format string, args ...any) {
	w.errs = w.errs.collect(&Error{File: w.file, Line: n.Line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// bad reports a problem with the value n and takes the value out of the
// tree, so the lab decodes as if it were left out (its default applies)
// and validation can still look at everything else.
func (w *walker) bad(n *yaml.Node, path, format string, args ...any) {
	w.fail(n, path, format, args...)
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
}

var secretRefType = reflect.TypeOf(SecretRef{})

var index = regexp.MustCompile(`\[\d+\]`)

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	if w.budget--; w.budget < 0 {
		if w.budget == -1 {
			w.fail(n, path, "the document expands too many aliases; write the values out instead of repeating *references")
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if path != "" {
		w.lines[path] = n.Line
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == secretRefType && n.Kind == yaml.ScalarNode {
		w.bad(n, path, "inline secrets are not allowed; keep the secret in an environment variable or a file and write %s: {env: NAME} or %s: {file: PATH}", lastName(path), lastName(path))
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.bad(n, path, "must be a mapping of fields, got %s", describe(n))
			return
		}
		fields := yamlFields(t)
		seen := map[string]int{}
		// Pairs with a bad key are left out of the tree (see bad).
		kept := make([]*yaml.Node, 0, len(n.Content))
		defer func() { n.Content = kept }()
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				w.fail(k, path, "field names must be plain words, got %s", describe(k))
				continue
			}
			if looksSecret(k.Value) {
				w.fail(k, path, "has a field name that looks like a secret (not shown); lab.yaml holds no secrets: keep it in an environment variable or a file and name that in a reference such as tokenSecret: {env: NAME}")
				continue
			}
			child := join(path, k.Value)
			if first, dup := seen[k.Value]; dup {
				w.fail(k, child, "is set twice (first on line %d); keep one", first)
				continue
			}
			seen[k.Value] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				msg := "unknown field"
				s := suggest(k.Value, fields)
				if s != "" {
					msg += fmt.Sprintf(", did you mean %q?", s)
				} else {
					msg += fmt.Sprintf("; %s takes: %s", nameOr(path, "the lab"), strings.Join(sortedKeys(fields), ", "))
				}
				w.fail(k, child, "%s", msg)
				if s != "" {
					// The misspelt field is most likely the one it was meant
					// to be: validation finding that one missing says nothing new.
					w.errs[len(w.errs)-1].covers = join(path, s)
				}
				continue
			}
			kept = append(kept, k, v)
			w.walk(v, f, child)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.bad(n, path, "must be a list, got %s", describe(n))
			return
		}
		if len(n.Content) > maxListEntries {
			noun := listNouns[index.ReplaceAllString(path, "[]")]
			if noun == "" {
				noun = "entries"
			}
			w.bad(n, path, "lists %d %s; lab.yaml takes at most %d here, so check the file is the lab you meant", len(n.Content), noun, maxListEntries)
			return
		}
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			target := item
			if target.Kind == yaml.AliasNode && target.Alias != nil {
				target = target.Alias
			}
			if target.Kind == yaml.ScalarNode && target.Tag == "!!null" {
				// yaml drops empty entries, which would shift the rest.
				w.fail(item, ip, "is an empty entry; fill it in or remove its '-'")
				continue
			}
			w.walk(item, t.Elem(), ip)
		}
	case reflect.String:
		switch {
		case n.Kind != yaml.ScalarNode:
			w.bad(n, path, "must be a string, got %s", describe(n))
		case looksSecret(n.Value) && !secretsChecked[index.ReplaceAllString(path, "[]")] && !urlPaths[index.ReplaceAllString(path, "[]")]:
			w.bad(n, path, "looks like a secret (not shown); lab.yaml holds no secrets: keep it in an environment variable or a file and name that in a reference such as tokenSecret: {env: NAME}")
		}
	case reflect.Int:
		if _, err := strconv.Atoi(n.Value); n.Kind == yaml.ScalarNode && errors.Is(err, strconv.ErrRange) {
			// yaml tags a whole number past int64 as a float.
			w.bad(n, path, "%s is too large for any count or size here", n.Value) // digits only: ErrRange
			return
		}
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!str") {
			w.bad(n, path, "must be a whole number, got %s", describe(n))
			return
		}
		// A written 0 where a left-out number takes a default is the
		// conversion's to refuse: the field is a pointer (v1alpha1.go).
		_, err := strconv.Atoi(n.Value)
		switch {
		case err != nil:
			w.bad(n, path, "must be a whole number, got %s", shown(n.Value))
		case n.Tag == "!!str":
			w.bad(n, path, "must be a whole number, got the string %s; write it without quotes", shown(n.Value))
		}
	case reflect.Bool:
		switch {
		case n.Kind == yaml.ScalarNode && n.Tag == "!!str" && (n.Value == "true" || n.Value == "false"):
			w.bad(n, path, "must be true or false, got the string %q; write it without quotes", n.Value)
		case n.Kind != yaml.ScalarNode || n.Tag != "!!bool":
			w.bad(n, path, "must be true or false, got %s", describe(n))
		}
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "the alias *" + n.Value
	}
	return shown(n.Value)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func lastName(path string) string {
	return path[strings.LastIndex(path, ".")+1:]
}

func nameOr(path, alt string) string {
	if path == "" {
		return alt
	}
	return path
}

// yamlFields maps each yaml key of struct t to its field type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		m[name] = f.Type
	}
	return m
}
