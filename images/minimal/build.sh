#!/bin/sh
# The minimal image, for tests: Debian trixie minbase plus sudo, procps, iproute2, python3, curl,
# nodejs and ca-certificates (clients of the egress gateway), what SSH users run on the far side
# (sftp-server for sftp and scp, rsync, git), and the agent user.
#
# Usage: build.sh ROOTFS MIRROR
. "$(dirname "$0")/../lib/rootfs.sh"

bootstrap "$1" "$2" sudo,procps,iproute2,python3,curl,nodejs,ca-certificates,openssh-sftp-server,rsync,git
add_agent "$1"
finish "$1"
