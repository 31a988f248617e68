# Shared steps of every image definition; build.sh sources this file. POSIX sh.
#
# Runs as root on the host, in the daemon's mount namespace: what a script leaves mounted inside
# the rootfs (debootstrap's /proc and /sys, apt_install's cache after a failure) the daemon
# unmounts once the script has ended, however it ended.

set -eu

SUITE=trixie

# bootstrap ROOTFS MIRROR PACKAGES: a minbase Debian $SUITE plus PACKAGES (comma-separated).
bootstrap() {
	set -- --variant=minbase --components=main --include="$3" "$SUITE" "$1" "$2"
	# A shared package cache makes a rebuild (or a CI re-run) download nothing.
	if [ -n "${HILOOP_DEBOOTSTRAP_CACHE:-}" ]; then
		mkdir -p "$HILOOP_DEBOOTSTRAP_CACHE"
		set -- --cache-dir="$HILOOP_DEBOOTSTRAP_CACHE" "$@"
	fi
	debootstrap "$@"
}

# apt_install ROOTFS PACKAGE...: PACKAGEs installed by the image's own apt once bootstrap is done,
# for those whose dependencies debootstrap's resolver cannot follow (npm's: it leaves some out and
# the configuration fails). apt reaches the mirror bootstrap used, through the host's resolver
# (debootstrap's copy of resolv.conf, which finish empties); with HILOOP_DEBOOTSTRAP_CACHE it
# shares debootstrap's package cache, bound in for the install only (finish's apt-get clean must
# not empty it).
apt_install() {
	root=$1
	shift
	if [ -n "${HILOOP_DEBOOTSTRAP_CACHE:-}" ]; then
		mkdir -p "$HILOOP_DEBOOTSTRAP_CACHE/partial"
		mount --bind "$HILOOP_DEBOOTSTRAP_CACHE" "$root/var/cache/apt/archives"
		trap 'umount "$root/var/cache/apt/archives"' EXIT
	fi
	echo "I: Installing $*"
	chroot "$root" apt-get update -qq
	chroot "$root" apt-get install -y -qq --no-install-recommends "$@"
	if [ -n "${HILOOP_DEBOOTSTRAP_CACHE:-}" ]; then
		umount "$root/var/cache/apt/archives"
		trap - EXIT
	fi
}

# add_agent ROOTFS: the user sandboxes run as, uid/gid 1000, with passwordless sudo.
add_agent() {
	echo "I: Adding user agent (1000:1000)"
	chroot "$1" groupadd --gid 1000 agent
	chroot "$1" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent \
		--shell /bin/bash agent
	chown -R 1000:1000 "$1/home/agent"
	chmod 0755 "$1/home/agent"
	printf 'agent ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$1/etc/sudoers.d/agent"
	chmod 0440 "$1/etc/sudoers.d/agent"
	chroot "$1" visudo -cqf /etc/sudoers.d/agent
}

# finish ROOTFS: the mount point of the workspace, host traces out, caches and logs emptied.
finish() {
	echo "I: Cleaning up"
	mkdir -p "$1/workspace"
	chown 1000:1000 "$1/workspace"
	chmod 0755 "$1/workspace"
	# debootstrap copies these from the host; the runtime writes the sandbox's own.
	: >"$1/etc/resolv.conf"
	echo localhost >"$1/etc/hostname"
	chroot "$1" apt-get clean
	rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/debconf/*-old \
		"$1"/var/log/apt/* "$1"/var/log/*.log "$1"/tmp/* "$1"/var/tmp/* "$1"/root/.bash_history
	mkdir -p "$1/var/lib/apt/lists/partial"
}
