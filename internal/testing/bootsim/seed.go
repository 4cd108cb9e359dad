package bootsim

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	diskfile "github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"sigs.k8s.io/yaml"
)

// Seed is a NoCloud seed as CAPMOX attaches it: an ISO 9660 volume
// labelled cidata with user-data, meta-data and network-config at its
// root. CAPMOX v0.9.0 (internal/inject/inject.go, injectCloudInit) hands
// the kubeadm bootstrap provider's data, its own meta-data
// (pkg/cloudinit/metadata.go) and network-config to go-proxmox v0.6.0's
// VirtualMachine.CloudInit, whose makeCloudInitISO (virtual_machine.go)
// writes them with go-diskfs v1.9.3's iso9660 (Rock Ridge and Joliet,
// volume identifier "cidata") and uploads user-data-<vmid>.iso.
type Seed struct {
	UserData, MetaData, NetworkConfig []byte
}

// ReadSeed reads the seed files from an ISO's bytes with the library that
// wrote them. cloud-init's NoCloud datasource finds the seed by its label
// (cloudinit/sources/DataSourceNoCloud.py: label "cidata", any case), so
// a volume of another label is no seed, as it would be to a booting VM.
func ReadSeed(iso []byte) (*Seed, error) {
	dir, err := os.MkdirTemp("", "bootsim-seed-")
	if err != nil {
		return nil, fmt.Errorf("reading the cloud-init ISO: %w", err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "seed.iso")
	if err := os.WriteFile(path, iso, 0o600); err != nil {
		return nil, fmt.Errorf("reading the cloud-init ISO: %w", err)
	}
	b, err := diskfile.OpenFromPath(path, true)
	if err != nil {
		return nil, fmt.Errorf("reading the cloud-init ISO: %w", err)
	}
	defer b.Close()
	fs, err := iso9660.Read(b, int64(len(iso)), 0, 2048)
	if err != nil {
		return nil, fmt.Errorf("reading the cloud-init ISO: not an ISO 9660 volume: %w", err)
	}
	// go-diskfs pads the identifier with NULs, the standard with spaces;
	// blkid, which cloud-init asks, reads either as the bare name.
	if label := strings.Trim(fs.Label(), " \x00"); !strings.EqualFold(label, "cidata") {
		return nil, fmt.Errorf("reading the cloud-init ISO: volume label %q is not cidata, so NoCloud would not find it", label)
	}
	read := func(name string, required bool) ([]byte, error) {
		f, err := fs.OpenFile("/"+name, os.O_RDONLY)
		if err != nil {
			if required {
				return nil, fmt.Errorf("reading the cloud-init ISO: no %s at its root: %w", name, err)
			}
			return nil, nil
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if err != nil {
			return nil, fmt.Errorf("reading the cloud-init ISO's %s: %w", name, err)
		}
		return data, nil
	}
	s := &Seed{}
	if s.UserData, err = read("user-data", true); err != nil {
		return nil, err
	}
	if s.MetaData, err = read("meta-data", true); err != nil {
		return nil, err
	}
	if s.NetworkConfig, err = read("network-config", false); err != nil {
		return nil, err
	}
	return s, nil
}

// MetaData is NoCloud's meta-data: a YAML map (instance-id,
// local-hostname, hostname, provider-id, kubernetes-version from CAPMOX).
type MetaData map[string]any

// ParseMetaData reads meta-data as NoCloud does (a YAML mapping).
func ParseMetaData(data []byte) (MetaData, error) {
	var md MetaData
	if err := yaml.Unmarshal(data, &md); err != nil {
		return nil, fmt.Errorf("meta-data is not YAML: %w", err)
	}
	if md == nil {
		return nil, fmt.Errorf("meta-data is empty")
	}
	return md, nil
}

// String is a meta-data key's value as text, "" when absent.
func (md MetaData) String(key string) string {
	v, ok := md[key]
	if !ok || v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// Hostname is the name cloud-init gives the guest: local-hostname
// (cloudinit/sources/__init__.py get_hostname: metadata
// "local-hostname"), which cc_set_hostname sets.
func (md MetaData) Hostname() string { return md.String("local-hostname") }

// jinjaHeader is the first line that makes cloud-init render user-data
// as a Jinja template (cloudinit/handlers/jinja_template.py,
// JINJA_PREFIX "## template: jinja"); Cluster API's kubeadm bootstrap
// provider writes it (bootstrap/kubeadm/internal/cloudinit/cloudinit.go,
// cloudConfigHeader, v1.12.10).
const jinjaHeader = "## template: jinja"

// MissingJinjaVar is what cloud-init renders for an undefined variable
// (cloudinit/templater.py MISSING_JINJA_PREFIX, then the variable's
// name), logging a warning instead of failing.
const MissingJinjaVar = "CI_MISSING_JINJA_VAR/"

var (
	jinjaExpr  = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)
	jinjaBlock = regexp.MustCompile(`\{%|\{#`)
	jinjaPath  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// RenderUserData renders user-data as cloud-init would before reading it
// as cloud-config: with the Jinja header, each {{ a.b.c }} is looked up in
// the instance data, where ds.meta_data is the datasource's meta-data and
// v1 the standard keys (instance_id, local_hostname); keys with '-' are
// also reachable with '_' (cloudinit/handlers/jinja_template.py,
// convert_jinja_instance_data). Without the header the text is left as it
// is, braces and all. Only plain variable lookups are rendered here;
// anything else (filters, statements) is an error of the stand-in, named
// as such, not a guess.
func RenderUserData(userData []byte, md MetaData) ([]byte, error) {
	first, rest, _ := bytes.Cut(userData, []byte("\n"))
	if strings.TrimSpace(string(first)) != jinjaHeader {
		return userData, nil
	}
	if jinjaBlock.Match(rest) {
		return nil, fmt.Errorf("user-data uses Jinja statements or comments, which this stand-in does not render")
	}
	vars := map[string]any{
		"ds": map[string]any{"meta_data": underscored(map[string]any(md))},
		"v1": map[string]any{
			"instance_id":    md.String("instance-id"),
			"local_hostname": md.Hostname(),
		},
	}
	var errs []string
	out := jinjaExpr.ReplaceAllStringFunc(string(rest), func(m string) string {
		expr := jinjaExpr.FindStringSubmatch(m)[1]
		if !jinjaPath.MatchString(expr) {
			errs = append(errs, expr)
			return m
		}
		parts := strings.Split(expr, ".")
		var cur any = vars
		for _, p := range parts {
			mm, ok := cur.(map[string]any)
			if !ok {
				return MissingJinjaVar + p
			}
			if cur, ok = mm[p]; !ok {
				return MissingJinjaVar + p
			}
		}
		return fmt.Sprint(cur)
	})
	if errs != nil {
		return nil, fmt.Errorf("user-data's Jinja expressions %q are more than variable lookups, which this stand-in does not render", errs)
	}
	return []byte(out), nil
}

// underscored adds, for every key with a '-', the same value under the
// key with '_' (recursively), as cloud-init's convert_jinja_instance_data.
func underscored(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = underscored(sub)
		}
		out[k] = v
		if u := strings.ReplaceAll(k, "-", "_"); u != k {
			if _, taken := m[u]; !taken {
				out[u] = v
			}
		}
	}
	return out
}

// CloudConfig is the part of #cloud-config this stand-in acts on.
type CloudConfig struct {
	WriteFiles []WriteFile `json:"write_files"`
	// RunCmd entries are strings (run by sh -c) or lists (argv).
	RunCmd []any `json:"runcmd"`
}

// WriteFile is one write_files entry (cloudinit/config/cc_write_files.py).
type WriteFile struct {
	Path        string `json:"path"`
	Content     string `json:"content"`
	Encoding    string `json:"encoding"`
	Owner       string `json:"owner"`
	Permissions string `json:"permissions"`
}

// ParseCloudConfig reads rendered user-data as cloud-config: it must start
// with "#cloud-config" (cloudinit/handlers/cloud_config.py), and every
// write_files entry's content is decoded as cc_write_files decodes it
// (b64, gzip, gz+b64 and their spellings).
func ParseCloudConfig(rendered []byte) (*CloudConfig, error) {
	first, _, _ := bytes.Cut(bytes.TrimLeft(rendered, "\n"), []byte("\n"))
	if strings.TrimSpace(string(first)) != "#cloud-config" {
		return nil, fmt.Errorf("user-data is not #cloud-config (first line %q)", first)
	}
	var cc CloudConfig
	if err := yaml.Unmarshal(rendered, &cc); err != nil {
		return nil, fmt.Errorf("user-data is not valid cloud-config YAML: %w", err)
	}
	for i := range cc.WriteFiles {
		f := &cc.WriteFiles[i]
		data, err := decodeContent(f.Content, f.Encoding)
		if err != nil {
			return nil, fmt.Errorf("user-data write_files %s: %w", f.Path, err)
		}
		f.Content, f.Encoding = string(data), ""
	}
	return &cc, nil
}

// decodeContent is cc_write_files.py's canonicalize_extraction and
// extract_contents.
func decodeContent(content, encoding string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "text/plain":
		return []byte(content), nil
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(strings.TrimSpace(content))
	case "gz", "gzip":
		return gunzip([]byte(content))
	case "gz+base64", "gzip+base64", "gz+b64", "gzip+b64":
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(content))
		if err != nil {
			return nil, err
		}
		return gunzip(raw)
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// File is the content of the write_files entry at path.
func (cc *CloudConfig) File(path string) ([]byte, bool) {
	for _, f := range cc.WriteFiles {
		if f.Path == path {
			return []byte(f.Content), true
		}
	}
	return nil, false
}

// Commands are the runcmd entries as shell text.
func (cc *CloudConfig) Commands() []string {
	var out []string
	for _, c := range cc.RunCmd {
		switch x := c.(type) {
		case string:
			out = append(out, x)
		case []any:
			var argv []string
			for _, a := range x {
				argv = append(argv, fmt.Sprint(a))
			}
			out = append(out, strings.Join(argv, " "))
		}
	}
	return out
}
