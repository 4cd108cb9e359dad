#!/usr/bin/env bash
# Builds the real-VM test image: a small Debian 12 cloud image with
# cloud-init, openssh-server and e2fsprogs, made from Debian packages only
# (mmdebstrap), into .cache/libvirt-testbed (gitignored). Skips the build
# when the image is there. Prints the image path last.
#
# It holds what labctl relies on in the Ubuntu 24.04 cloud image and no
# more: in particular no qemu-guest-agent, which that image does not ship,
# so a test that passes here does not lean on an agent the lab lacks.
# The version in the file name is the cache key: bump it whenever the
# package list or the hooks change, so every checkout rebuilds.
#
# Needs root and: mmdebstrap fdisk grub-pc-bin e2fsprogs qemu-utils.
# Measured on 2 cores: 1.5 to 3.5 min cold.
#
# The host kernel may lack partition-table loop support (losetup -P gives no
# loop0p1), so the root partition is mounted at its offset and GRUB's
# boot.img and core.img are written by hand instead of grub-install.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${LABCTL_TEST_IMAGE_DIR:-$root/.cache/libvirt-testbed}
image=$out/debian12-cloud-v2.qcow2
if [ -s "$image" ] && [ -s "$image.sha256" ]; then
	echo "test image: present" >&2
	echo "$image"
	exit 0
fi
for tool in mmdebstrap sfdisk mkfs.ext4 grub-mkimage qemu-img losetup; do
	command -v "$tool" >/dev/null || { echo "build-image: $tool is missing; apt-get install --no-install-recommends mmdebstrap fdisk grub-pc-bin e2fsprogs qemu-utils" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "build-image: must run as root (mmdebstrap, losetup, mount)" >&2; exit 1; }

start=$SECONDS
mkdir -p "$out"
work=$(mktemp -d "$out/build.XXXXXX")
loop=""
cleanup() {
	mountpoint -q "$work/mnt" 2>/dev/null && umount "$work/mnt"
	[ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# The Debian mirror this machine already uses; nothing else is contacted.
mirror=${MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v -e security -e '^$' | grep debian | head -n 1)}
secmirror=${SECMIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep security | head -n 1)}
# Classic one-line sources as a fallback: "deb URI suite components".
mirror=${mirror:-$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)}
secmirror=${secmirror:-$(awk '$1 == "deb" && $2 ~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)}
[ -n "$mirror" ] || { echo "build-image: no Debian mirror found in /etc/apt/sources.list*; set MIRROR=<your Debian mirror URL>" >&2; exit 1; }

echo "test image: mmdebstrap from $mirror" >&2
mmdebstrap --quiet --variant=apt --components=main \
	--include=linux-image-amd64,systemd-sysv,udev,e2fsprogs,cloud-init,cloud-guest-utils,openssh-server,ifupdown,isc-dhcp-client,iproute2,sudo,dbus,netbase,procps \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--customize-hook='echo "LABEL=rootfs / ext4 defaults,errors=remount-ro 0 1" > "$1/etc/fstab"' \
	--customize-hook='printf "auto lo\niface lo inet loopback\nsource /etc/network/interfaces.d/*\n" > "$1/etc/network/interfaces"' \
	--customize-hook='printf "datasource_list: [ NoCloud, None ]\nlocale: C.UTF-8\nmanage_etc_hosts: localhost\n" > "$1/etc/cloud/cloud.cfg.d/90_labctl_testbed.cfg"' \
	--customize-hook='echo LANG=C.UTF-8 > "$1/etc/default/locale"' \
	--customize-hook='systemctl --root="$1" mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer systemd-timesyncd.service' \
	--customize-hook='rm -f "$1/etc/resolv.conf"; : > "$1/etc/resolv.conf"; echo localhost > "$1/etc/hostname"' \
	--customize-hook='rm -f "$1"/etc/ssh/ssh_host_* "$1/etc/machine-id"; touch "$1/etc/machine-id"' \
	--customize-hook='cd "$1"/usr/lib/modules/*/kernel && rm -rf sound drivers/gpu drivers/media drivers/infiniband drivers/iio drivers/staging drivers/comedi drivers/isdn drivers/bluetooth drivers/net/wireless drivers/net/ethernet net/wireless net/mac80211 net/bluetooth' \
	--customize-hook='for k in "$1"/usr/lib/modules/*; do chroot "$1" depmod -a "$(basename "$k")"; done' \
	--customize-hook='sed -i "s/^MODULES=.*/MODULES=list/" "$1/etc/initramfs-tools/initramfs.conf"; printf "virtio_pci\nvirtio_blk\nvirtio_scsi\nvirtio_net\nsd_mod\nsr_mod\nisofs\next4\ncrc32c_generic\n" >> "$1/etc/initramfs-tools/modules"; chroot "$1" update-initramfs -u -k all' \
	bookworm "$work/rootfs" \
	"deb $mirror bookworm main" \
	"deb $mirror bookworm-updates main" \
	${secmirror:+"deb $secmirror bookworm-security main"}
echo "test image: rootfs built in $((SECONDS - start)) s" >&2

size_mb=3072
kver=$(ls "$work"/rootfs/boot/vmlinuz-* | sed 's/.*vmlinuz-//' | sort -V | tail -n 1)
truncate -s "${size_mb}M" "$work/disk.raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$work/disk.raw"
loop=$(losetup -f --show -o $((2048 * 512)) --sizelimit $(((size_mb - 1) * 1024 * 1024)) "$work/disk.raw")
mkfs.ext4 -q -L rootfs "$loop"
mkdir -p "$work/mnt"
mount "$loop" "$work/mnt"
tar -C "$work/rootfs" --xattrs --xattrs-include='*' -cf - . | tar -C "$work/mnt" --xattrs --xattrs-include='*' --numeric-owner -xpf -
mkdir -p "$work/mnt/boot/grub/i386-pc"
cp /usr/lib/grub/i386-pc/*.mod /usr/lib/grub/i386-pc/*.lst "$work/mnt/boot/grub/i386-pc/"
cat >"$work/mnt/boot/grub/grub.cfg" <<GRUB
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
menuentry 'Debian 12 (labctl test image)' {
  search --no-floppy --label rootfs --set=root
  linux /boot/vmlinuz-$kver root=LABEL=rootfs ro console=tty0 console=ttyS0,115200n8
  initrd /boot/initrd.img-$kver
}
GRUB
umount "$work/mnt"
fsck.ext4 -fy "$loop" >/dev/null || true
losetup -d "$loop"
loop=""
grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
	biosdisk part_msdos ext2 normal linux search search_label serial terminal configfile echo test
[ "$(stat -c %s "$work/core.img")" -lt $((2047 * 512)) ] || { echo "build-image: GRUB core.img does not fit before the partition" >&2; exit 1; }
dd if=/usr/lib/grub/i386-pc/boot.img of="$work/disk.raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$work/disk.raw" bs=512 seek=1 conv=notrunc status=none
qemu-img convert -c -O qcow2 "$work/disk.raw" "$work/image.qcow2"
(cd "$work" && sha256sum image.qcow2 | awk '{print $1}') >"$work/image.sha256"
mv "$work/image.qcow2" "$image"
mv "$work/image.sha256" "$image.sha256"
echo "test image: built $image ($(du -h "$image" | cut -f1)) in $((SECONDS - start)) s" >&2
echo "$image"
