#!/bin/sh
# The default image: Debian trixie minbase plus the tools a coding agent and a person expect (git,
# curl, python3, make and a C toolchain, unzip, jq, an SSH client, nano and vim), what SSH users
# run on the far side (sftp-server for sftp and scp, rsync), and the agent user.
#
# Usage: build.sh ROOTFS MIRROR
. "$(dirname "$0")/../lib/rootfs.sh"

bootstrap "$1" "$2" sudo,bash,coreutils,git,curl,ca-certificates,procps,iproute2,python3,less,openssh-sftp-server,rsync,make,gcc,libc6-dev,unzip,jq,openssh-client,nano,vim-tiny
add_agent "$1"
finish "$1"
