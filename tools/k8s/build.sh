#!/bin/bash
# build.sh builds the Kubernetes control plane the cluster tests run against (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) from this directory's go.mod, and links
# Debian's etcd next to them, into $HILOOP_K8S_CACHE/<key>/bin. <key> is a hash of go.mod, go.sum
# and this script, so a cache dir is never stale: a change to any of them builds into a new one.
# The directory is also a KUBEBUILDER_ASSETS directory for controller-runtime's envtest.
#
# Prints the bin directory on stdout (progress goes to stderr). With the cache present it only
# checks a stamp file and returns. A cold build takes minutes and ~600 MB of modules.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${HILOOP_K8S_CACHE:-/var/cache/hiloop-test/k8s}
etcd=${HILOOP_ETCD:-/usr/bin/etcd}
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-16)
dir=$cache/$key
bin=$dir/bin

# The fast path: a finished build (the stamp is written last) whose etcd link still resolves.
if [ -f "$dir/complete" ] && [ -x "$bin/etcd" ]; then
	echo "$bin"
	exit 0
fi

if [ ! -x "$etcd" ]; then
	echo "build.sh: no etcd at $etcd: install Debian's etcd-server (make deps) or set HILOOP_ETCD" >&2
	exit 1
fi

mkdir -p "$dir"
# One builder at a time per key; a second waits and then finds the stamp.
exec 9>"$dir/lock"
flock 9
if [ ! -f "$dir/complete" ]; then
	version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod" | head -n1)
	if [[ ! $version =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
		echo "build.sh: cannot read the k8s.io/kubernetes version from $here/go.mod (got '$version')" >&2
		exit 1
	fi
	major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
	# What kube's own build (hack/lib/version.sh) stamps in, so /version reports the real release.
	ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$version -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	pkgs=()
	for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done

	echo "build.sh: building Kubernetes $version (${cmds[*]}) into $bin; cold, this takes minutes" >&2
	start=$(date +%s)
	rm -rf "$bin.tmp"
	mkdir -p "$bin.tmp"
	(cd "$here" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" CGO_ENABLED=0 \
		go build -trimpath -ldflags "$ldflags" -o "$bin.tmp/" "${pkgs[@]}")
	ln -sf "$etcd" "$bin.tmp/etcd"
	rm -rf "$bin"
	mv "$bin.tmp" "$bin"
	echo "$version" >"$dir/complete"
	echo "build.sh: built in $(($(date +%s) - start)) s" >&2
fi
# A cache dir that outlived a removed etcd gets its link back (the stamp alone is not enough).
[ -x "$bin/etcd" ] || ln -sf "$etcd" "$bin/etcd"
echo "$bin"
