#!/usr/bin/env bash
# The libvirt benchmark, in one run on a real libvirtd: the same VM (test
# image, size, network, cloud-init documents) made with plain virsh and
# genisoimage (virsh-vm.sh) and by labctl's driver, timed from the first
# command to the guest's sshd on its address; then two labctl VMs at once;
# then labctl's Cluster API provider (TestRealVMMachineDeployment, with the
# real Cluster API core manager and IPAM of the test bed), timed from the
# Machine's creation to the domain running and to its sshd. Prints the
# BENCH lines and the ratios (goal: labctl <= 1.1 x virsh). Needs root,
# and the test bed (make testbed) for the provider's part.
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
LABCTL_BENCH=1 LABCTL_TEST_IMAGE=$image LABCTL_REQUIRE_LIBVIRT=1 KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$root/.testbed/bin} \
	go test -run '^TestRealVMMachineDeployment$' -count=1 -v -timeout 60m ./internal/provider/libvirt/controller >>"$log" 2>&1 || status=$?
cat "$log"
echo
grep -h 'BENCH' "$log" | sed 's/^ *[a-z_]*test.go:[0-9]*: //' || true
virsh=$(grep -ho 'virsh+genisoimage [0-9.]*s' "$log" | head -n 1 | tr -dc '0-9.')
provider=$(grep -ho 'Machine created -> domain running [0-9.]*s, -> sshd on [0-9.]* [0-9.]*s' "$log" | head -n 1 | awk '{print $NF}' | tr -dc '0-9.')
if [ -n "$virsh" ] && [ -n "$provider" ]; then
	awk -v v="$virsh" -v p="$provider" 'BEGIN { printf "BENCH provider, Machine created -> sshd: %.1fs against virsh+genisoimage %.1fs, ratio %.2f\n", p, v, p / v }'
fi
rm -f "$log"
exit "$status"
