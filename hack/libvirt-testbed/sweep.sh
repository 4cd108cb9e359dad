#!/usr/bin/env bash
# Removes what real-VM tests leave behind when they are killed before their
# cleanup runs: domains labctl-test-*/bench-*, the pool and network
# labctl-test, and the network's FORWARD fence. host-down.sh runs it when
# the last user leaves; a real-VM test runs it once it holds the machine's
# VM turn (internal/testing/libvirttest.TakeVMTurn), when no other test can
# be using them. It prints what it removed. Safe to run any number of times.
set -uo pipefail
net=labctl-test
pool=labctl-test
bridge=lc-$net
v() { virsh -q -c qemu:///system "$@" 2>/dev/null; }

if [ -S /run/libvirt/libvirt-sock ]; then
	for d in $(v list --all --name); do
		case "$d" in
		labctl-test-* | bench-*)
			v destroy "$d" >/dev/null
			v undefine "$d" --managed-save --snapshots-metadata >/dev/null
			echo "removed domain $d"
			;;
		esac
	done
	if v pool-info "$pool" >/dev/null; then
		for vol in $(v vol-list "$pool" | awk '{print $1}'); do v vol-delete --pool "$pool" "$vol" >/dev/null; done
		v pool-destroy "$pool" >/dev/null
		v pool-delete "$pool" >/dev/null
		v pool-undefine "$pool" >/dev/null
		echo "removed pool $pool"
	fi
	if v net-info "$net" >/dev/null; then
		v net-destroy "$net" >/dev/null
		v net-undefine "$net" >/dev/null
		echo "removed network $net"
	fi
fi
# A pool's folder outlives its libvirtd (host-up starts a new one): files a
# killed run left there would come back as volumes of the next run's pool,
# which its "nothing left" checks then find.
dir=/var/lib/libvirt/images/$pool
if [ -d "$dir" ] && ! { [ -S /run/libvirt/libvirt-sock ] && v pool-info "$pool" >/dev/null; }; then
	for f in "$dir"/*; do
		[ -e "$f" ] || continue
		rm -f -- "$f" && echo "removed $f"
	done
	rmdir "$dir" 2>/dev/null && echo "removed folder $dir"
fi
while iptables -D FORWARD -i "$bridge" ! -o "$bridge" -j REJECT 2>/dev/null; do echo "removed the FORWARD fence of $bridge"; done
true
