package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/labctl/labctl/internal/userhome"
)

// ReadSecret returns the secret a SecretRef names, trimmed of surrounding
// whitespace. Errors name the env variable or file and never carry the
// value. what says whose secret it is, e.g. "the token secret of pve".
func ReadSecret(ref SecretRef, what string) (string, error) {
	switch {
	case ref.Env != "":
		v, ok := os.LookupEnv(ref.Env)
		if !ok {
			return "", fmt.Errorf("reading %s: env %s is not set; export it", what, ref.Env)
		}
		if v = strings.TrimSpace(v); v == "" {
			return "", fmt.Errorf("reading %s: env %s is empty", what, ref.Env)
		}
		return v, nil
	case ref.File != "":
		path, err := ExpandHome(ref.File)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", what, err)
		}
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("reading %s: file %s does not exist; write the secret there and chmod 600 it", what, path)
		case err != nil:
			// The path error names the file; it never holds the content.
			return "", fmt.Errorf("reading %s: %w", what, err)
		}
		v := strings.TrimSpace(string(data))
		if v == "" {
			return "", fmt.Errorf("reading %s: file %s is empty", what, path)
		}
		return v, nil
	}
	return "", fmt.Errorf("reading %s: no env or file is named for it", what)
}

// ExpandHome replaces a leading ~/ with the home folder of the user
// labctl works for: under sudo, the invoking user's (see userhome).
func ExpandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := userhome.Dir()
	if err != nil {
		return "", fmt.Errorf("cannot expand %s: %w", path, err)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}
