#!/bin/sh
# The default image: Debian trixie minbase plus the tools a coding agent and a person expect (git,
# curl, Python 3 with venv and pip, Node and npm, make and a C toolchain, unzip, jq, an SSH
# client, nano and vim), what SSH users run on the far side (sftp-server for sftp and scp, rsync),
# and the agent user. Debian does not package uv (docs/cli.md says how to get it).
#
# Usage: build.sh ROOTFS MIRROR
. "$(dirname "$0")/../lib/rootfs.sh"

bootstrap "$1" "$2" sudo,bash,coreutils,git,curl,ca-certificates,procps,iproute2,python3,python3-venv,python3-pip,nodejs,less,openssh-sftp-server,rsync,make,gcc,libc6-dev,unzip,jq,openssh-client,nano,vim-tiny
apt_install "$1" npm
add_agent "$1"
finish "$1"
