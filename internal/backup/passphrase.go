package backup

import (
	"errors"
	"fmt"
	"os"

	"github.com/labctl/labctl/internal/ui"
)

// EnvPassphrase holds the passphrase for scripts; without it labctl asks
// on the terminal.
const EnvPassphrase = "LABCTL_BACKUP_PASSPHRASE"

// Passphrase returns the backup's passphrase: $LABCTL_BACKUP_PASSPHRASE,
// else typed on the terminal without echo, twice when a new backup is
// written (confirm), so a typo never locks the owner out of it. It is
// never printed, logged or passed on in argv.
func Passphrase(io *ui.IO, file string, confirm bool) (string, error) {
	if v, ok := os.LookupEnv(EnvPassphrase); ok {
		if v == "" {
			return "", fmt.Errorf("%s is set but empty: set it to the passphrase, or unset it to be asked", EnvPassphrase)
		}
		return v, nil
	}
	p, err := io.ReadSecret(fmt.Sprintf("Passphrase for %s: ", file))
	if errors.Is(err, ui.ErrNoSecretPrompt) {
		return "", fmt.Errorf("the backup needs a passphrase and %w: set %s", err, EnvPassphrase)
	}
	if err != nil {
		return "", err
	}
	if p == "" {
		return "", errors.New("the passphrase is empty: a backup holds CA keys and kubeconfigs, so it needs one")
	}
	if !confirm {
		return p, nil
	}
	again, err := io.ReadSecret("The same passphrase again: ")
	if err != nil {
		return "", err
	}
	if again != p {
		return "", errors.New("the two passphrases differ: nothing was written")
	}
	return p, nil
}
