package pvetest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Schema is the real PVE API schema (apidoc.json from ../shared/pve), used
// to reject every request a real PVE 9 would reject for its path, method,
// parameter names, types or enum values.
type Schema struct {
	routes []route
}

type route struct {
	path    string
	segs    []string
	methods map[string]*method
}

type method struct {
	Parameters struct {
		Properties           map[string]*prop `json:"properties"`
		AdditionalProperties any              `json:"additionalProperties"`
	} `json:"parameters"`
	Returns struct {
		Properties map[string]*prop `json:"properties"`
	} `json:"returns"`
}

type prop struct {
	Type       string          `json:"type"`
	Enum       []string        `json:"enum"`
	Optional   flag            `json:"optional"`
	Format     json.RawMessage `json:"format"`
	Minimum    *num            `json:"minimum"`
	Maximum    *num            `json:"maximum"`
	MaxLength  int             `json:"maxLength"`
	DefaultKey flag            `json:"default_key"`
	Alias      string          `json:"alias"`
}

// num is a schema number, sometimes written as a string.
type num float64

func (n *num) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(strings.Trim(string(b), `"`), 64)
	*n = num(f)
	return err
}

// flag is PVE's 0/1 (sometimes true/false) schema flag.
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	*f = s == "1" || s == "true"
	return nil
}

type node struct {
	Path     string             `json:"path"`
	Info     map[string]*method `json:"info"`
	Children []node             `json:"children"`
}

// SchemaPath is where the schema is kept, relative to the module root:
// ../shared/pve/apidoc.json. It is AGPL test data and never copied in.
const SchemaPath = "../shared/pve/apidoc.json"

// LoadSchema reads apidoc.json.
func LoadSchema(path string) (*Schema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the PVE API schema: %w", err)
	}
	var tree []node
	if err := json.Unmarshal(data, &tree); err != nil {
		return nil, fmt.Errorf("parsing the PVE API schema %s: %w", path, err)
	}
	s := &Schema{}
	var walk func([]node)
	walk = func(ns []node) {
		for _, n := range ns {
			if len(n.Info) > 0 {
				s.routes = append(s.routes, route{path: n.Path, segs: split(n.Path), methods: n.Info})
			}
			walk(n.Children)
		}
	}
	walk(tree)
	if len(s.routes) < 100 {
		return nil, fmt.Errorf("the PVE API schema %s has only %d paths; is it the real apidoc.json?", path, len(s.routes))
	}
	return s, nil
}

// MustLoadSchema finds ../shared/pve/apidoc.json from the module root and
// skips the test, saying why, when ../shared is absent (a user's fresh clone).
func MustLoadSchema(t testing.TB) *Schema {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, SchemaPath)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: the real PVE API schema %s is absent (../shared is not beside this checkout; CI has it)", p)
	}
	cache.Lock()
	defer cache.Unlock()
	if cache.s == nil {
		s, err := LoadSchema(p)
		if err != nil {
			t.Fatal(err)
		}
		cache.s = s
	}
	return cache.s
}

// cache keeps the parsed schema for the test binary; it is read-only.
var cache struct {
	sync.Mutex
	s *Schema
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's folder")
		}
		dir = parent
	}
}

func split(p string) []string { return strings.Split(strings.Trim(p, "/"), "/") }

// Match finds the schema route of a request path (without /api2/json) and
// returns its template and path parameters.
func (s *Schema) Match(path string) (tmpl string, params map[string]string, ok bool) {
	segs := wholeVolume(split(path))
	best := -1
	for i, r := range s.routes {
		if len(r.segs) != len(segs) {
			continue
		}
		p := map[string]string{}
		literal := 0
		match := true
		for j, seg := range r.segs {
			if strings.HasPrefix(seg, "{") {
				p[strings.Trim(seg, "{}")] = segs[j]
				continue
			}
			if seg != segs[j] {
				match = false
				break
			}
			literal++
		}
		if match && (best < 0 || literal > countLiteral(s.routes[best].segs)) {
			best, params = i, p
		}
	}
	if best < 0 {
		return "", nil, false
	}
	return s.routes[best].path, params, true
}

// wholeVolume joins what follows /nodes/<node>/storage/<storage>/content/
// into one segment: PVE mounts the content API with fragmentDelimiter ”
// because volume IDs may hold a '/' (pve-storage's
// src/PVE/API2/Storage/Status.pm; pve-common's RESTHandler.pm
// map_path_to_methods then matches the rest of the URI as {volume}). So
// go-proxmox's GET .../content/local:iso/user-data-202.iso, unescaped, is
// the volume local:iso/user-data-202.iso, as on a real PVE.
func wholeVolume(segs []string) []string {
	if len(segs) > 6 && segs[0] == "nodes" && segs[2] == "storage" && segs[4] == "content" {
		return append(segs[:5:5], strings.Join(segs[5:], "/"))
	}
	return segs
}

func countLiteral(segs []string) int {
	n := 0
	for _, s := range segs {
		if !strings.HasPrefix(s, "{") {
			n++
		}
	}
	return n
}

// Check validates one request: path and method exist, every parameter is
// known with a valid type, enum and (for property strings) sub-keys, and
// every required parameter is present. params holds path, query and body
// parameters as PVE would see them.
func (s *Schema) Check(httpMethod, path string, params map[string]string) (tmpl string, errs map[string]string) {
	tmpl, pathParams, ok := s.Match(path)
	if !ok {
		return "", map[string]string{"path": fmt.Sprintf("no such path %s in the PVE API", path)}
	}
	var m *method
	for _, r := range s.routes {
		if r.path == tmpl {
			m = r.methods[httpMethod]
		}
	}
	if m == nil {
		return tmpl, map[string]string{"method": fmt.Sprintf("%s %s is not in the PVE API", httpMethod, tmpl)}
	}
	all := map[string]string{}
	for k, v := range params {
		all[k] = v
	}
	for k, v := range pathParams {
		all[k] = v
	}
	errs = map[string]string{}
	props := m.Parameters.Properties
	for name, val := range all {
		p := lookup(props, name)
		if p == nil {
			errs[name] = "property is not defined in schema and the schema does not allow additional properties"
			continue
		}
		if msg := checkValue(p, val); msg != "" {
			errs[name] = msg
		}
	}
	for name, p := range props {
		if strings.Contains(name, "[n]") || bool(p.Optional) {
			continue
		}
		if _, ok := all[name]; !ok {
			errs[name] = "property is missing and it is not optional"
		}
	}
	if len(errs) == 0 {
		return tmpl, nil
	}
	return tmpl, errs
}

// Typed turns an object's string values into the JSON types the method's
// returns schema gives them, as PVE's JSON formatter writes them: integer
// and number as numbers, boolean as 0 or 1, the rest as strings. So a
// client that decodes cores into an int sees what a real PVE sends.
func (s *Schema) Typed(httpMethod, tmpl string, obj map[string]string) map[string]any {
	var props map[string]*prop
	for _, r := range s.routes {
		if r.path == tmpl {
			if m := r.methods[httpMethod]; m != nil {
				props = m.Returns.Properties
			}
		}
	}
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
		p := lookup(props, k)
		if p == nil {
			continue
		}
		switch p.Type {
		case "integer":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[k] = n
			}
		case "number":
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out[k] = f
			}
		case "boolean":
			if boolRe.MatchString(v) {
				out[k] = map[bool]int{true: 1, false: 0}[trueRe.MatchString(v)]
			}
		}
	}
	return out
}

var indexed = regexp.MustCompile(`^([a-z_-]+?)(\d+)$`)

func lookup(props map[string]*prop, name string) *prop {
	if p, ok := props[name]; ok {
		return p
	}
	if m := indexed.FindStringSubmatch(name); m != nil {
		return props[m[1]+"[n]"]
	}
	return nil
}

var (
	intRe     = regexp.MustCompile(`^-?\d+$`)
	boolRe    = regexp.MustCompile(`(?i)^(0|1|true|false|yes|no|on|off)$`)
	trueRe    = regexp.MustCompile(`(?i)^(1|true|yes|on)$`)
	tagRe     = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`)
	nodeRe    = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$`)
	storageRe = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	// urlencoded is PVE's check: only unreserved characters or %XX.
	urlencRe = regexp.MustCompile(`^(?:[A-Za-z0-9\-._~]|%[0-9A-Fa-f]{2})*$`)
)

func checkValue(p *prop, v string) string {
	switch p.Type {
	case "integer":
		if !intRe.MatchString(v) {
			return fmt.Sprintf("type check ('integer') failed - got '%s'", v)
		}
		n, _ := strconv.ParseFloat(v, 64)
		if p.Minimum != nil && n < float64(*p.Minimum) {
			return fmt.Sprintf("value must have a minimum value of %v", *p.Minimum)
		}
		if p.Maximum != nil && n > float64(*p.Maximum) {
			return fmt.Sprintf("value may have a maximum value of %v", *p.Maximum)
		}
	case "number":
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return fmt.Sprintf("type check ('number') failed - got '%s'", v)
		}
	case "boolean":
		if !boolRe.MatchString(v) {
			return fmt.Sprintf("type check ('boolean') failed - got '%s'", v)
		}
	case "array":
		if v == "" {
			return "type check ('array') failed - got an empty list"
		}
		return ""
	}
	if len(p.Enum) > 0 && !contains(p.Enum, v) {
		return fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", v, strings.Join(p.Enum, ", "))
	}
	if p.MaxLength > 0 && len(v) > p.MaxLength {
		return fmt.Sprintf("value may only be %d characters long", p.MaxLength)
	}
	if len(p.Format) == 0 {
		return ""
	}
	var named string
	if json.Unmarshal(p.Format, &named) == nil {
		return checkFormat(named, v)
	}
	var sub map[string]*prop
	if err := json.Unmarshal(p.Format, &sub); err != nil {
		return ""
	}
	return checkPropertyString(sub, v)
}

func checkFormat(format, v string) string {
	switch format {
	case "pve-tag-list":
		for _, t := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			if !tagRe.MatchString(t) {
				return fmt.Sprintf("invalid format - invalid tag '%s'", t)
			}
		}
	case "urlencoded":
		if !urlencRe.MatchString(v) {
			return "invalid format - invalid urlencoded string"
		}
	case "pve-node":
		if !nodeRe.MatchString(v) {
			return "invalid format - value does not look like a valid node name"
		}
	case "pve-storage-id":
		if !storageRe.MatchString(v) {
			return "invalid format - storage ID '" + v + "' contains illegal characters"
		}
	}
	return ""
}

// checkPropertyString validates "key=value,..." against a dict format, with
// the default key allowed bare, as PVE's parse_property_string does.
func checkPropertyString(sub map[string]*prop, v string) string {
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		if part == "" {
			continue
		}
		key, val, hasEq := strings.Cut(part, "=")
		if !hasEq {
			val, key = key, ""
			for k, p := range sub {
				if p.DefaultKey {
					key = k
				}
			}
			if key == "" {
				return fmt.Sprintf("invalid format - value without key, but schema does not define a default key: '%s'", part)
			}
		}
		p, ok := sub[key]
		if !ok {
			return fmt.Sprintf("invalid format - property '%s' is not defined in schema", key)
		}
		if p.Alias != "" {
			key, p = p.Alias, sub[p.Alias]
			if p == nil {
				continue
			}
		}
		if seen[key] {
			return fmt.Sprintf("invalid format - duplicate key in comma-separated list property: %s", key)
		}
		seen[key] = true
		if msg := checkValue(p, val); msg != "" {
			return fmt.Sprintf("invalid format - %s: %s", key, msg)
		}
	}
	return ""
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// flatten turns query or form values into one value per name, as PVE
// accepts (a repeated name is an error there).
func flatten(v url.Values) (map[string]string, error) {
	out := map[string]string{}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(v[k]) > 1 {
			return nil, fmt.Errorf("parameter %s given %d times", k, len(v[k]))
		}
		out[k] = v[k][0]
	}
	return out, nil
}
