#!/bin/sh
# The default image: Debian trixie minbase plus the tools a coding agent expects (git, curl,
# python3, ...) and the agent user.
#
# Usage: build.sh ROOTFS MIRROR
. "$(dirname "$0")/../lib/rootfs.sh"

bootstrap "$1" "$2" sudo,bash,coreutils,git,curl,ca-certificates,procps,iproute2,python3,less
add_agent "$1"
finish "$1"
