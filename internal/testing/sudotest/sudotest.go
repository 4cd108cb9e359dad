// Package sudotest makes a test run as if labctl had been started with
// sudo by another user.
package sudotest

import (
	"os"
	"os/user"
	"strconv"
	"testing"

	"github.com/labctl/labctl/internal/userhome"
)

// Fake makes the test run as if 'sudo labctl' had been typed by user
// name (uid, gid) whose home is home: sudo's variables are set as sudo(8)
// sets them, HOME is root's (always_set_home), XDG_CONFIG_HOME is gone
// (env_reset), and the password database answers for name. Files only
// change owner when the test runs as root, as labctl under sudo does; it
// is skipped otherwise.
func Fake(t testing.TB, name string, uid, gid int, home string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("faking sudo needs root: giving a file to another user is root's")
	}
	t.Setenv("SUDO_USER", name)
	t.Setenv("SUDO_UID", strconv.Itoa(uid))
	t.Setenv("SUDO_GID", strconv.Itoa(gid))
	t.Setenv("HOME", "/root")
	t.Setenv("XDG_CONFIG_HOME", "")
	real := user.Lookup
	t.Cleanup(userhome.SetLookup(func(n string) (*user.User, error) {
		if n == name {
			return &user.User{Username: name, Uid: strconv.Itoa(uid), Gid: strconv.Itoa(gid), HomeDir: home}, nil
		}
		return real(n)
	}))
}
