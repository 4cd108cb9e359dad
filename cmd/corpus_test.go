package cmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// corpusNotes are the "# want: ", "# secret: " and "# wantnot: " lines of
// a testdata config.
func corpusNotes(data []byte, kind string) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimPrefix(line, "\ufeff"), "# "+kind+": "); ok {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}

// TestConfigCorpus runs every config under internal/config/testdata through
// 'config validate' and 'config view', as a user would. An invalid one
// exits 1 with every problem on a "FILE:LINE: " line, names its field (the
// first "# want:"), and never shows a "# secret:" value; a valid one exits
// 0 and 'config view' of it reads back to the very same bytes.
func TestConfigCorpus(t *testing.T) {
	invalid, _ := filepath.Glob("../internal/config/testdata/invalid/*.yaml")
	valid, _ := filepath.Glob("../internal/config/testdata/valid/*.yaml")
	if len(invalid) < 100 || len(valid) < 5 {
		t.Fatalf("corpus too small: %d invalid, %d valid", len(invalid), len(valid))
	}
	for _, path := range invalid {
		t.Run("invalid/"+filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			wants, secrets, wantnots := corpusNotes(data, "want"), corpusNotes(data, "secret"), corpusNotes(data, "wantnot")
			if len(wants) == 0 {
				t.Fatal("no '# want:' line")
			}
			code, stdout, stderr := run(t, "", "config", "validate", "-c", path)
			if code != 1 {
				t.Fatalf("validate exit %d, want 1\n%s%s", code, stdout, stderr)
			}
			problems := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(problems) < 2 || !strings.Contains(problems[0], path+": ") {
				t.Fatalf("validate did not name the file first:\n%s", stderr)
			}
			onLine := regexp.MustCompile(`^  ` + regexp.QuoteMeta(path) + `:[1-9]\d*: `)
			for _, p := range problems[1:] {
				if !onLine.MatchString(p) {
					t.Errorf("problem without file and line: %q", p)
				}
			}
			first := wants[0]
			if strings.HasPrefix(first, ":") {
				first = path + first
			}
			if !strings.Contains(stderr, first) {
				t.Errorf("validate does not name %q:\n%s", first, stderr)
			}
			for _, w := range wantnots {
				if strings.Contains(stderr, w) {
					t.Errorf("validate says %q, which it must not:\n%s", w, stderr)
				}
			}
			vcode, vout, verr := run(t, "", "config", "view", "-c", path)
			if vcode != 1 || vout != "" {
				t.Errorf("view exit %d with %d bytes on stdout; want 1 and nothing", vcode, len(vout))
			}
			for _, s := range secrets {
				if all := stdout + stderr + vout + verr; strings.Contains(all, s) {
					t.Errorf("the secret %q was shown:\n%s", s, all)
				}
			}
		})
	}
	for _, path := range valid {
		t.Run("valid/"+filepath.Base(path), func(t *testing.T) {
			if code, stdout, stderr := run(t, "", "config", "validate", "-c", path); code != 0 {
				t.Fatalf("validate exit %d\n%s%s", code, stdout, stderr)
			}
			code, first, stderr := run(t, "", "config", "view", "-c", path)
			if code != 0 {
				t.Fatalf("view exit %d\n%s", code, stderr)
			}
			code, second, stderr := run(t, first, "config", "view", "-c", "-")
			if code != 0 {
				t.Fatalf("view of view exit %d\n%s", code, stderr)
			}
			if second != first {
				t.Errorf("view of view differs:\n--- first\n%s\n--- second\n%s", first, second)
			}
			if strings.Contains(first, "\r") || strings.HasPrefix(first, "\ufeff") || strings.Contains(first, "REDACTED") {
				t.Errorf("view output carries a CR, a BOM or a redaction:\n%q", first)
			}
		})
	}
}
