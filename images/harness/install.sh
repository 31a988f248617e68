#!/bin/sh
# Installs harnesses into a root filesystem that a definition's build.sh has finished: runs each
# SCRIPT (a harness adapter's Install script, written out by the image build) as root in a chroot
# of ROOTFS, then tidies the rootfs up again the way build.sh's finish does.
#
# The scripts reach the npm registry (and, when the image lacks npm, the Debian mirror) through
# the host: the host's DNS, its proxy variables and its CA certificates are lent to the chroot
# for the install and taken back afterwards, so none of them stays in the image.
#
# Usage: install.sh ROOTFS SCRIPT...
. "$(dirname "$0")/../lib/rootfs.sh"

rootfs=$1
shift
# Everything lent to the chroot lives here, so one rm takes it back; finish empties /tmp too.
work=/tmp/hiloop-harness-install

cleanup() {
	if grep -q " $rootfs/proc " /proc/self/mountinfo; then
		umount "$rootfs/proc"
	fi
	rm -rf "$rootfs$work"
}
trap cleanup EXIT

mkdir -p "$rootfs$work"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
mount -t proc proc "$rootfs/proc"
# Node trusts its own CA list, not the image's: a host behind a TLS-inspecting proxy needs its CAs
# lent to the install (NODE_EXTRA_CA_CERTS adds them to Node's).
ca=
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
	if [ -f "$f" ]; then
		cp "$f" "$rootfs$work/host-ca.crt"
		ca=$work/host-ca.crt
		break
	fi
done

for script; do
	name=$(basename "$script" .sh)
	echo "I: Installing harness $name"
	cp "$script" "$rootfs$work/$name.sh"
	# The host's environment passes through (proxy and npm_config_* variables); what would point
	# at host paths is replaced. HOME is lent too: what a harness's --version check writes there
	# (Codex's and OpenCode's state) does not belong in the image.
	mkdir -p "$rootfs$work/home"
	HOME=$work/home TMPDIR=/tmp PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		npm_config_cache="$work/npm-cache" NODE_EXTRA_CA_CERTS="$ca" \
		chroot "$rootfs" /bin/bash "$work/$name.sh"
done

cleanup
finish "$rootfs"
