package packertest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// The QEMU builder stand-in copies hashicorp/packer-plugin-qemu v1.1.4
// (image-builder v0.1.46's packer/qemu/config.pkr.hcl asks for "~> 1.1.0";
// v1.1.4 is the newest of that line), seen from outside: what it prints,
// which files it leaves where, and its exit codes. No VM boots: the
// machine's real qemu-img makes and converts the disk, and qemu-io writes
// into it what an install would, so the output is a real qcow2 whose
// bytes differ from build to build.
//   - builder/qemu/config.go Prepare: disk_size given as a bare number is
//     in MiB ("20480" becomes "20480M"); format is qcow2 or raw ("invalid
//     format, only 'qcow2' or 'raw' are allowed"); output_directory
//     defaults to "output-<build name>" and vm_name to "packer-<build
//     name>"; without -force an existing output_directory fails Prepare:
//     "Output directory '<dir>' already exists. It must not exist."
//   - builder/qemu/builder.go Run: the driver needs qemu_binary and
//     qemu-img on PATH ("Failed creating Qemu driver: …"); then
//     stepPrepareOutputDir (MkdirAll; on cancel or halt its Cleanup says
//     "Deleting output directory..." and removes it), stepCreateDisk
//     ("qemu-img create -f <format> <output_directory>/<vm_name>
//     <disk_size>"), stepRun ("Starting VM, booting from CD-ROM"), SSH,
//     the provisioners, stepShutdown ("Gracefully halting virtual
//     machine..."), stepConvertDisk ("Converting hard drive...",
//     "qemu-img convert -O <format> <disk> <disk>.convert", renamed over
//     the disk).
//   - builder/qemu/artifact.go: BuilderId "transcend.qemu", Id "VM",
//     String "VM files in directory: <output_directory>", Files every file
//     under output_directory.
//
// STANDIN_MODE=hang waits for SIGINT or SIGTERM once the VM "runs";
// STANDIN_MODE=fail fails the SSH wait, as a guest that never comes up.
// STANDIN_DISK_MIB (default 4) is how much the "install" writes.

var bareSize = regexp.MustCompile(`^\d+$`)

// qemuPrepare is Config.Prepare's checks that a build can meet or miss.
func qemuPrepare(b map[string]string) error {
	if bareSize.MatchString(b["disk_size"]) {
		b["disk_size"] += "M"
	}
	if b["disk_size"] == "" || b["disk_size"] == "0" {
		b["disk_size"] = "40960M"
	}
	if b["format"] == "" {
		b["format"] = "qcow2"
	}
	if b["output_directory"] == "" {
		b["output_directory"] = "output-" + b["type"]
	}
	if b["vm_name"] == "" {
		b["vm_name"] = "packer-" + b["type"]
	}
	if b["qemu_binary"] == "" {
		b["qemu_binary"] = "qemu-system-x86_64"
	}
	var errs []error
	if b["format"] != "qcow2" && b["format"] != "raw" {
		errs = append(errs, errors.New("invalid format, only 'qcow2' or 'raw' are allowed"))
	}
	if _, err := os.Stat(b["output_directory"]); err == nil {
		errs = append(errs, fmt.Errorf("Output directory '%s' already exists. It must not exist.", b["output_directory"]))
	}
	return errors.Join(errs...)
}

func qemu(ctx context.Context, u *ui, name string, b map[string]string) (art artifact, err error) {
	say := func(format string, args ...any) { u.build("say", name, fmt.Sprintf(format, args...), true) }
	for _, bin := range []string{b["qemu_binary"], "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			return artifact{}, fmt.Errorf("Failed creating Qemu driver: %s", err)
		}
	}
	say("Retrieving ISO")
	u.build("message", name, "Using file in Packer cache: "+b["iso_url"], true)
	dir, disk := b["output_directory"], filepath.Join(b["output_directory"], b["vm_name"])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return artifact{}, err
	}
	defer func() {
		if err != nil {
			// stepPrepareOutputDir.Cleanup, on a halted or cancelled build.
			say("Deleting output directory...")
			_ = os.RemoveAll(dir)
		}
	}()
	img := func(args ...string) error {
		out, err := exec.CommandContext(ctx, "qemu-img", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := img("create", "-f", b["format"], disk, b["disk_size"]); err != nil {
		err = fmt.Errorf("Error creating hard drive: %s", err)
		u.build("error", name, err.Error(), true)
		return artifact{}, err
	}
	say("Starting VM, booting from CD-ROM")
	say("Waiting for SSH to become available...")
	switch os.Getenv("STANDIN_MODE") {
	case "hang":
		<-ctx.Done()
		return artifact{}, ctx.Err()
	case "fail":
		return artifact{}, errors.New("Timeout waiting for SSH.")
	}
	say("Connected to SSH!")
	say("Provisioning with Ansible...")
	// What the install and the playbooks write, different each build.
	mib := atoiOr(os.Getenv("STANDIN_DISK_MIB"), 4)
	for i := range mib {
		cmd := fmt.Sprintf("write -P %d %dM 1M", 1+rand.IntN(254), i)
		if out, err := exec.CommandContext(ctx, "qemu-io", "-f", b["format"], "-c", cmd, disk).CombinedOutput(); err != nil {
			return artifact{}, fmt.Errorf("stand-in install: qemu-io %s: %w: %s", cmd, err, out)
		}
	}
	say("Gracefully halting virtual machine...")
	say("Converting hard drive...")
	if err := img("convert", "-O", b["format"], disk, disk+".convert"); err != nil {
		err = fmt.Errorf("Error converting hard drive: %s", err)
		u.build("error", name, err.Error(), true)
		return artifact{}, err
	}
	if err := os.Rename(disk+".convert", disk); err != nil {
		err = fmt.Errorf("Error moving converted hard drive: %s", err)
		u.build("error", name, err.Error(), true)
		return artifact{}, err
	}
	art = artifact{builderID: "transcend.qemu", id: "VM", text: "VM files in directory: " + dir}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			art.files = append(art.files, p)
		}
		return err
	})
	return art, err
}
