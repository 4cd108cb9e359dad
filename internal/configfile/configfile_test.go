package configfile_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/configfile"
	"github.com/labctl/labctl/internal/ui"
)

func testIO(out *os.File) (*ui.IO, *bytes.Buffer) {
	s, _, _, errBuf := ui.Test()
	if out != nil {
		s.Out = out
	}
	return s, errBuf
}

// TestInitTemplates writes each starter a user can ask for and checks what
// they then find: a 0600 file that validates unedited, none of the owner's
// own addresses, and CHANGE ME on each value a Proxmox user must fill in.
func TestInitTemplates(t *testing.T) {
	for _, tc := range []struct {
		name       string
		o          configfile.InitOptions
		want       []string // lines (trimmed) the file must hold
		changeMeAt []string // keys whose line must say CHANGE ME
		noChangeMe bool
	}{
		{name: "default proxmox", o: configfile.InitOptions{},
			want:       []string{"url: https://pve.example.internal:8006 # CHANGE ME: your Proxmox VE API (port 8006)"},
			changeMeAt: []string{"url:", "tokenID:", "- name: pve1", "cidr:", "gateway:", "ip:", "endpoint:", "nodeIPRange:"}},
		{name: "proxmox URL", o: configfile.InitOptions{Proxmox: "https://pve1.lan"},
			want:       []string{"url: https://pve1.lan:8006"},
			changeMeAt: []string{"tokenID:", "cidr:", "gateway:", "ip:"}},
		{name: "local", o: configfile.InitOptions{Local: true},
			want: []string{"uri: qemu:///system", "cidr: 10.213.0.0/24"}, noChangeMe: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "lab.yaml")
			s, errOut := testIO(nil)
			tc.o.IO, tc.o.Path = s, path
			if err := configfile.Init(tc.o); err != nil {
				t.Fatalf("init: %v", err)
			}
			if !strings.Contains(errOut.String(), "wrote "+path) {
				t.Errorf("stderr %q does not say what was written", errOut)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %04o, want 0600", path, fi.Mode().Perm())
			}
			data, _ := os.ReadFile(path)
			if _, _, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true}); err != nil {
				t.Fatalf("the file config init wrote does not validate unedited: %v", err)
			}
			text := string(data)
			if strings.Contains(text, "192.168.") || strings.Contains(text, "pv1-1") {
				t.Errorf("the starter holds the owner's own lab (192.168.x or pv1-1):\n%s", text)
			}
			lines := strings.Split(text, "\n")
			has := func(prefix string) string {
				for _, l := range lines {
					if strings.HasPrefix(strings.TrimSpace(l), prefix) {
						return l
					}
				}
				return ""
			}
			for _, w := range tc.want {
				if has(w) == "" {
					t.Errorf("no line %q in:\n%s", w, text)
				}
			}
			for _, k := range tc.changeMeAt {
				if l := has(k); !strings.Contains(l, "# CHANGE ME") {
					t.Errorf("line of %q is %q; want it marked # CHANGE ME", k, l)
				}
			}
			if tc.o.Proxmox != "" && strings.Contains(has("url:"), "CHANGE ME") {
				t.Errorf("--proxmox filled in the URL but left it marked: %q", has("url:"))
			}
			if tc.noChangeMe && strings.Contains(text, "CHANGE ME") {
				t.Errorf("the local lab works as written, yet marks values to change:\n%s", text)
			}
		})
	}
}

func TestInitRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		o    configfile.InitOptions
		want string
	}{
		{"not a URL", configfile.InitOptions{Proxmox: "pve1"}, `--proxmox "pve1": want the Proxmox VE API URL`},
		{"plain http", configfile.InitOptions{Proxmox: "http://pve1:8006"}, `--proxmox "http://pve1:8006"`},
		{"credentials in the URL", configfile.InitOptions{Proxmox: "https://root:pw@pve1:8006"}, "--proxmox: the URL holds credentials"},
		{"both", configfile.InitOptions{Proxmox: "https://pve1:8006", Local: true}, "--local and --proxmox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testIO(nil)
			tc.o.IO, tc.o.Path = s, filepath.Join(dir, tc.name+".yaml")
			err := configfile.Init(tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "pw@") {
				t.Errorf("the error shows the password: %v", err)
			}
			if _, err := os.Stat(tc.o.Path); err == nil {
				t.Error("a refused init wrote the file")
			}
		})
	}
}

// TestInitForceNarrowsMode: --force over a world-readable file leaves it 0600.
func TestInitForceNarrowsMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := testIO(nil)
	if err := configfile.Init(configfile.InitOptions{IO: s, Path: path, Force: true}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o after --force, want 0600", fi.Mode().Perm())
	}
}

// TestViewIntoDefaultFile is 'labctl config view > lab.yaml': the shell
// has emptied ./lab.yaml and made it stdout before labctl runs. Printing
// the built-in lab into it would replace the user's lab without a word, so
// it is refused and the file stays empty.
func TestViewIntoDefaultFile(t *testing.T) {
	t.Chdir(t.TempDir())
	out, err := os.Create("lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := testIO(out)
	err = view(s, config.DefaultPath, false)
	out.Close()
	if err == nil || !strings.Contains(err.Error(), "lab.yaml is the file the output is redirected into") || !strings.Contains(err.Error(), "config init --local") {
		t.Fatalf("config view > lab.yaml: err = %v", err)
	}
	if data, _ := os.ReadFile("lab.yaml"); len(data) != 0 {
		t.Errorf("config view wrote into lab.yaml:\n%s", data)
	}

	// Named explicitly, the emptied file cannot be the source: say why.
	out, _ = os.Create("mine.yaml")
	s, _ = testIO(out)
	err = view(s, "mine.yaml", true)
	out.Close()
	if err == nil || !strings.Contains(err.Error(), "mine.yaml is the file the output is redirected into") {
		t.Errorf("config view -c mine.yaml > mine.yaml: err = %v", err)
	}
}

// TestEmptyDefaultFileElsewhere: any other command names the empty file
// and both ways out.
func TestEmptyDefaultFileElsewhere(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("lab.yaml", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, errOut := testIO(nil)
	err := configfile.Validate(context.Background(), configfile.ValidateOptions{IO: s, LoadLab: cmdutil.New(s, &cmdutil.Settings{Config: config.DefaultPath}).Lab})
	if err != configfile.ErrInvalid {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	for _, want := range []string{"./lab.yaml: the config is empty", "labctl config init --force -c ./lab.yaml", "delete the empty file"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
}

// view is 'labctl config view' through the command factory, which loads
// the lab as every command does (and knows the file stdout goes to).
func view(s *ui.IO, path string, explicit bool) error {
	f := cmdutil.New(s, &cmdutil.Settings{Config: path, ConfigExplicit: explicit})
	lab, src, err := f.Lab(context.Background())
	if err != nil {
		return err
	}
	return configfile.View(context.Background(), configfile.ViewOptions{IO: s, Lab: lab, Source: src})
}
