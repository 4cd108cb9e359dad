// labctl runs a home-lab Kubernetes platform from one lab.yaml.
package main

import (
	"os"

	"github.com/labctl/labctl/cmd"
)

func main() {
	os.Exit(cmd.Main())
}
