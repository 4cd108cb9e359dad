#!/usr/bin/env bash
# The benchmark's baseline: make and boot one VM with plain virsh,
# qemu-img (through virsh vol-create-as) and genisoimage, the way a person
# would by hand, and print its address once its sshd answers there (the
# static address in network-config; the test image, like Ubuntu's cloud
# image, has no guest agent to report one).
# Usage: virsh-vm.sh NAME POOL NETWORK IMAGE_VOLUME_PATH SEED_DIR MAC [TYPE]
#   SEED_DIR holds user-data, meta-data and network-config.
# Prints "<ip> <seconds from first command to sshd>" on stdout.
# Delete with: virsh-vm.sh --delete NAME POOL
set -euo pipefail
[ -z "${VIRSH_VM_TRACE:-}" ] || set -x
v() { virsh -q -c qemu:///system "$@"; }
if [ "${1:-}" = --delete ]; then
	name=$2 pool=$3
	v destroy "$name" >/dev/null 2>&1 || true
	v undefine "$name" >/dev/null 2>&1 || true
	v vol-delete --pool "$pool" "$name-disk0.qcow2" >/dev/null 2>&1 || true
	v vol-delete --pool "$pool" "$name-seed.iso" >/dev/null 2>&1 || true
	exit 0
fi
name=$1 pool=$2 network=$3 image=$4 seeddir=$5 mac=$6 type=${7:-qemu}
cpu="<cpu mode='host-passthrough' check='none'/>"
[ "$type" = qemu ] && cpu="<cpu mode='maximum' check='none'/>"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s.%N)

genisoimage -quiet -output "$work/seed.iso" -volid cidata -joliet -rock \
	"$seeddir/user-data" "$seeddir/meta-data" "$seeddir/network-config"
v vol-create-as "$pool" "$name-disk0.qcow2" 10G --format qcow2 --backing-vol "$image" --backing-vol-format qcow2 >/dev/null
v vol-create-as "$pool" "$name-seed.iso" "$(stat -c %s "$work/seed.iso")" --format raw >/dev/null
v vol-upload --pool "$pool" "$name-seed.iso" "$work/seed.iso"
cat >"$work/domain.xml" <<XML
<domain type='$type'>
  <name>$name</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  $cpu
  <clock offset='utc'/>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2' discard='unmap'/>
      <source pool='$pool' volume='$name-disk0.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='volume' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source pool='$pool' volume='$name-seed.iso'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    <interface type='network'>
      <mac address='$mac'/>
      <source network='$network'/>
      <model type='virtio'/>
    </interface>
    <serial type='pty'><log file='/var/log/libvirt/qemu/$name-console.log' append='off'/><target port='0'/></serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <video><model type='none'/></video>
    <memballoon model='virtio'/>
  </devices>
</domain>
XML
v define "$work/domain.xml" >/dev/null
v start "$name" >/dev/null
ip=$(awk '$1 == "-" && $2 ~ /^[0-9.]+\/[0-9]+$/ {sub("/.*", "", $2); print $2; exit}' "$seeddir/network-config")
[ -n "$ip" ] || { echo "virsh-vm: no static address in $seeddir/network-config" >&2; exit 1; }
for _ in $(seq 900); do
	if banner=$(timeout 5 bash -c "exec 3<>/dev/tcp/$ip/22 && head -c 7 <&3" 2>/dev/null) && [ "$banner" = SSH-2.0 ]; then
		echo "$ip $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')"
		exit 0
	fi
	sleep 1
done
echo "virsh-vm: no sshd on $ip for $name after 900 s" >&2
exit 1
