#!/bin/sh
# The image for the real coding agents: the base image's packages, then (after this script) the
# harnesses listed in ./harnesses, each installed by its adapter's own Install script
# (internal/harness/<name>) with its pinned version. Debian's nodejs and npm (the base image has
# them) run the npm installs; claude-code and codex run on a Node 22 of their own.
#
# Usage: build.sh ROOTFS MIRROR
. "$(dirname "$0")/../lib/rootfs.sh"

# The base image's packages (images/base/build.sh).
bootstrap "$1" "$2" sudo,bash,coreutils,git,curl,ca-certificates,procps,iproute2,python3,python3-venv,python3-pip,nodejs,less,openssh-sftp-server,rsync,make,gcc,libc6-dev,unzip,jq,openssh-client,nano,vim-tiny
apt_install "$1" npm
add_agent "$1"
finish "$1"
