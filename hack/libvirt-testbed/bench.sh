#!/usr/bin/env bash
# The libvirt benchmark, in one run on a real libvirtd: the same VM (test
# image, size, network, cloud-init documents) made with plain virsh and
# genisoimage (virsh-vm.sh) and by labctl's driver, timed from the first
# command to the guest's address; then two labctl VMs at once. Prints the
# BENCH lines and the ratio (goal: labctl <= 1.1 x virsh). Needs root.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
image=$(hack/libvirt-testbed/build-image.sh | tail -n 1)
trap hack/libvirt-testbed/host-down.sh EXIT
hack/libvirt-testbed/host-up.sh
log=$(mktemp)
status=0
LABCTL_BENCH=1 LABCTL_TEST_IMAGE=$image LABCTL_REQUIRE_LIBVIRT=1 \
	go test -run '^TestBenchVirshVersusLabctl$' -count=1 -v -timeout 60m ./internal/hypervisor/libvirt >"$log" 2>&1 || status=$?
cat "$log"
echo
grep -h 'BENCH' "$log" | sed 's/^ *realvm_test.go:[0-9]*: //' || true
rm -f "$log"
exit "$status"
