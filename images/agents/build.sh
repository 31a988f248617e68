#!/bin/sh
# The image for the real coding agents: the base image's packages, then (after this script) the
# harnesses listed in ./harnesses, each installed by its adapter's own Install script
# (internal/harness/<name>) with its pinned version. The first of those scripts installs Debian's
# nodejs and npm, which run the npm installs; claude-code and codex run on a Node 22 of their own.
#
# Usage: build.sh ROOTFS MIRROR
. "$(dirname "$0")/../lib/rootfs.sh"

# The base image's packages (images/base/build.sh).
bootstrap "$1" "$2" sudo,bash,coreutils,git,curl,ca-certificates,procps,iproute2,python3,less,openssh-sftp-server,rsync,make,gcc,libc6-dev,unzip,jq,openssh-client,nano,vim-tiny
add_agent "$1"
finish "$1"
