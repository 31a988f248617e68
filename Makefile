# hiloop's front door: `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
PREFIX ?= /usr/local
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/hiloop/hiloop/internal/cli.Version=$(VERSION) -X github.com/hiloop/hiloop/internal/daemon.Version=$(VERSION)
# sandboxd needs cgo (libcontainer's nsenter) and libseccomp for the seccomp filter.
DAEMON_TAGS := seccomp
# Debian packages the daemon and the tests need (nodejs: the claude-code launcher test).
DEB_PACKAGES := gcc libc6-dev libseccomp-dev pkg-config xfsprogs debootstrap util-linux bsdutils iproute2 curl procps openssh-client rsync git nodejs tmux time docker-registry
# What the cluster tests need besides (make k8s): etcd-server, their etcd (/usr/bin/etcd). Kept
# out of `make deps`, which `make quickstart` runs: on a machine run by systemd the package also
# starts a system etcd, which hiloop itself has no use for.
K8S_DEB_PACKAGES := etcd-server
# Where the tests keep the built test image and debootstrap's downloads between runs.
TEST_CACHE ?= /var/cache/hiloop-test

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/hiloop, bin/hiloop-ssh, bin/sandboxd, bin/hiloop-init and bin/hiloop-fake-agent
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/hiloop ./cmd/hiloop
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/hiloop-ssh ./cmd/hiloop-ssh
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $(BIN)/hiloop-init ./cmd/hiloop-init
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $(BIN)/hiloop-fake-agent ./cmd/hiloop-fake-agent
	CGO_ENABLED=1 $(GO) build -tags '$(DAEMON_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/sandboxd ./cmd/sandboxd

# install-debs installs the Debian packages of $(1) that are missing (as root).
define install-debs
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" != 0 ]; then \
		echo "missing Debian packages (install them as root): $$missing"; \
	elif [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

.PHONY: deps
deps: ## install the Debian packages the daemon and the tests need (as root)
	$(call install-debs,$(DEB_PACKAGES))

.PHONY: k8s-deps
k8s-deps: ## install the Debian packages the cluster tests need besides (as root): their etcd
	$(call install-debs,$(K8S_DEB_PACKAGES))

.PHONY: install
install: build ## install the binaries into $(PREFIX)/bin
	install -m 0755 $(BIN)/hiloop $(BIN)/hiloop-ssh $(BIN)/sandboxd $(BIN)/hiloop-init $(BIN)/hiloop-fake-agent $(PREFIX)/bin/

# Where `make quickstart` and `make restart` have sandboxd serve managed SSH: the host's loopback.
SSH_LISTEN ?= 127.0.0.1:2222
# PEM files of CAs every sandbox trusts besides its image's (sandboxd --sandbox-ca), e.g. the host's
# bundle on a host whose way out re-signs TLS: make restart SANDBOX_CA=/etc/ssl/certs/ca-certificates.crt
SANDBOX_CA ?=
# An address where `make restart` has sandboxd serve its API over TLS to other machines
# (sandboxd --listen), e.g. make restart LISTEN=0.0.0.0:8443; empty: the unix socket only.
LISTEN ?=
SANDBOXD_LOG ?= /var/log/sandboxd.log

.PHONY: quickstart
quickstart: deps install ## set up hiloop: start sandboxd (SSH on loopback), build the base image, create a first sandbox
	@$(MAKE) --no-print-directory start-daemon
	$(PREFIX)/bin/hiloop version
	@v=$$($(PREFIX)/bin/hiloop version | awk '$$1 == "client" {c = $$2} $$1 == "daemon" {d = $$2} END {if (c != d) print d " " c}'); \
		if [ -n "$$v" ]; then set -- $$v; echo "note: the running sandboxd is build $$1, this install is $$2: 'make restart' runs the new build (running sandboxes keep running)"; fi
	@$(PREFIX)/bin/hiloop version -o json | grep -q '"ssh"' || \
		echo "note: the running sandboxd has no SSH endpoint ('hiloop sandbox ssh' and hiloop-ssh need one): 'make restart' starts it with --ssh-listen $(SSH_LISTEN)"
	$(PREFIX)/bin/hiloop image build base
	@$(PREFIX)/bin/hiloop sandbox get hello >/dev/null 2>&1 || $(PREFIX)/bin/hiloop sandbox create hello
	$(PREFIX)/bin/hiloop sandbox exec hello -- sh -c 'echo "hello from $$(hostname), $$(id -un) in $$(pwd)"; uname -sr'

# start-daemon starts the installed sandboxd in the background unless one answers already.
.PHONY: start-daemon
start-daemon:
	@if ! $(PREFIX)/bin/hiloop version >/dev/null 2>&1; then \
		echo "starting sandboxd with managed SSH on $(SSH_LISTEN), loopback only (log: $(SANDBOXD_LOG))"; \
		nohup $(PREFIX)/bin/sandboxd --ssh-listen $(SSH_LISTEN) $(if $(LISTEN),--listen $(LISTEN)) $(foreach f,$(SANDBOX_CA),--sandbox-ca $(f)) >>$(SANDBOXD_LOG) 2>&1 & \
		for i in $$(seq 100); do $(PREFIX)/bin/hiloop version >/dev/null 2>&1 && break; sleep 0.1; done; \
		$(PREFIX)/bin/hiloop version >/dev/null 2>&1 || { echo "sandboxd did not start; the end of $(SANDBOXD_LOG):"; tail -n 5 $(SANDBOXD_LOG); exit 1; }; \
	fi

.PHONY: stop
stop: ## stop the sandboxd that `make quickstart` started (sandboxes keep running; a new sandboxd picks them up)
	@if pkill -TERM -f '^$(PREFIX)/bin/sandboxd( |$$)'; then \
		echo "stopping sandboxd"; \
		for i in $$(seq 300); do pgrep -f '^$(PREFIX)/bin/sandboxd( |$$)' >/dev/null || break; sleep 0.1; done; \
		! pgrep -f '^$(PREFIX)/bin/sandboxd( |$$)' >/dev/null || { echo "sandboxd is still running after 30 s"; exit 1; }; \
	else echo "sandboxd is not running"; fi

.PHONY: restart
restart: install ## install this build and restart sandboxd on it (how to upgrade: git pull && make restart)
	@$(MAKE) --no-print-directory stop start-daemon
	$(PREFIX)/bin/hiloop version

.PHONY: image
image: ## build the base image through a running sandboxd
	$(BIN)/hiloop image build base

.PHONY: lint
lint: ## go vet, staticcheck (pinned in go.mod's tool block) and gofmt, and `make cross`
	$(GO) vet -tags '$(DAEMON_TAGS)' ./...
	$(GO) tool staticcheck -tags '$(DAEMON_TAGS)' ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi
	@$(MAKE) --no-print-directory cross
	@$(MAKE) --no-print-directory generate
	@git diff --quiet -- pkg/apis deploy/crds || { echo "make generate changed files: commit them"; git diff --stat -- pkg/apis deploy/crds; exit 1; }

.PHONY: generate
generate: ## regenerate the Kubernetes API's deep copies and CRDs (pkg/apis into deploy/crds) with controller-gen
	$(GO) tool controller-gen object paths=./pkg/apis/... crd:crdVersions=v1 output:crd:artifacts:config=deploy/crds

# The CLI ships for Linux, macOS and Windows (.goreleaser.yaml) but CI runs on Linux: the CLI's
# packages are vetted, and their tests compiled, for the other two.
CROSS_OS := windows darwin
CROSS_VET := ./cmd/hiloop/... ./cmd/hiloop-ssh/... ./internal/cli/... ./internal/remotes/... ./pkg/...
CROSS_TESTS := ./internal/cli ./internal/remotes ./pkg/client
.PHONY: cross
cross: ## go vet the CLI and compile its tests for windows and darwin
	@for os in $(CROSS_OS); do \
		echo "GOOS=$$os go vet $(CROSS_VET)"; \
		GOOS=$$os $(GO) vet $(CROSS_VET) || exit 1; \
		for p in $(CROSS_TESTS); do \
			echo "GOOS=$$os go test -c $$p"; \
			GOOS=$$os $(GO) test -c -o /dev/null $$p || exit 1; \
		done; \
	done

# Every fuzz target, as package:Function. `make fuzz` stops if a Fuzz function in the tree is
# missing here, so the list cannot silently fall behind.
FUZZ_TARGETS := \
	./pkg/api:FuzzValidateName \
	./pkg/api:FuzzValidateSessionID \
	./pkg/api:FuzzSandboxesPostNormalize \
	./pkg/api:FuzzSessionsPostNormalize \
	./pkg/api:FuzzExecRequestValidate \
	./pkg/api:FuzzPermissionAnswerValidate \
	./pkg/client:FuzzEventPage \
	./images:FuzzExtractTar \
	./pkg/api:FuzzNormalizeEgressRule \
	./internal/daemon:FuzzDecodeBody \
	./internal/runtime/initproc:FuzzRecv \
	./internal/runtime/initproc:FuzzMessageRoundTrip \
	./internal/runtime/initproc:FuzzLookupUser \
	./internal/cli:FuzzShimArgs \
	./internal/session:FuzzTap \
	./internal/gateway:FuzzResolverPacket \
	./internal/gateway:FuzzAddrPolicy \
	./internal/gateway:FuzzSniff \
	./internal/gateway:FuzzScrub \
	./internal/modelroute:FuzzMeter \
	./internal/tui/chat:FuzzMarkdown \
	./internal/acpview:FuzzDecode \
	./internal/eventlog:FuzzEncodeEvent \
	./internal/harness/fake:FuzzRecordEncoding \
	./internal/harness/fake:FuzzTextChunkLine \
	./internal/session:FuzzCanonicalUpdate \
	./internal/sshkey:FuzzParsePrivate \
	./internal/yamlout:FuzzMarshal \
	./pkg/api:FuzzShapesAsRegexps \
	./pkg/client:FuzzStreamEvent
FUZZTIME ?= 60s
# FUZZPARALLEL limits the fuzzing workers (default: one per CPU). -fuzzminimizetime is cut from
# its default of 60s, which would let minimizing one new input take a whole 60s budget.
FUZZPARALLEL ?=

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (default 60s); a crasher lands in the package's testdata/fuzz
	@missing=$$(git grep -h -o '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' | sed 's/^func //' | \
		while read -r fn; do case " $(FUZZ_TARGETS) " in *":$$fn "*) ;; *) echo "$$fn";; esac; done); \
	if [ -n "$$missing" ]; then echo "add to FUZZ_TARGETS in the Makefile:" $$missing; exit 1; fi
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; corpus=$$pkg/testdata/fuzz/$$fn; \
		echo "== $$fn ($$pkg)"; \
		before=$$(ls $$corpus 2>/dev/null | wc -l); \
		$(GO) test -tags '$(DAEMON_TAGS)' -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s \
			$(if $(FUZZPARALLEL),-parallel $(FUZZPARALLEL)) $$pkg && continue; \
		[ "$$(ls $$corpus 2>/dev/null | wc -l)" = "$$before" ] || exit 1; \
		echo "$$fn failed without writing an input (on a busy machine Go's fuzzing coordinator can end a run"; \
		echo "with 'context deadline exceeded' at the -fuzztime boundary); replaying its corpus instead"; \
		$(GO) test -tags '$(DAEMON_TAGS)' -count=1 -run "^$$fn\$$" $$pkg || exit 1; \
	done

# The Kubernetes control plane the cluster tests run (internal/k8stest): kube-apiserver,
# kube-scheduler, kube-controller-manager and kubectl built from tools/k8s/go.mod, with Debian's
# etcd linked in, in $(K8S_CACHE)/<hash of tools/k8s/{go.mod,go.sum,build.sh}>/bin. Minutes the
# first time, then cached; the directory is also a KUBEBUILDER_ASSETS for envtest.
K8S_CACHE ?= $(TEST_CACHE)/k8s
K8S_BUILD := HILOOP_K8S_CACHE=$(K8S_CACHE) tools/k8s/build.sh

.PHONY: k8s
k8s: deps k8s-deps ## build the Kubernetes control plane the cluster tests run (minutes once, then cached in TEST_CACHE)
	@$(K8S_BUILD) >/dev/null

# The first run on a machine also builds the test images into $(TEST_CACHE) (minimal, and agents
# for harnesses.txtar: minutes each), hence the timeout; later runs find them up to date.
.PHONY: test
test: deps lint k8s ## install what the tests need, then run every test (end-to-end ones need root)
	k8s_bin=$$($(K8S_BUILD)) && \
	HILOOP_K8S_BIN=$$k8s_bin KUBEBUILDER_ASSETS=$$k8s_bin \
	HILOOP_DEBOOTSTRAP_CACHE=$(TEST_CACHE)/debootstrap HILOOP_TEST_IMAGES=$(TEST_CACHE)/images \
		$(GO) test -tags '$(DAEMON_TAGS)' -race -count=1 -timeout 30m ./...

# The short soak and flood run inside `make test` (package internal/soak); this is the long one.
SOAK_KILLS ?= 120
SOAK_CONCURRENCY ?= 3
SOAK_SEED ?= 0
FLOOD_CONNS ?= 10000
FLOOD_NOFILE ?= 16384
.PHONY: soak
soak: deps ## kill sandboxd SOAK_KILLS times under a mixed workload and check every restart, then flood its socket with FLOOD_CONNS idle connections (docs/performance.md)
	HILOOP_DEBOOTSTRAP_CACHE=$(TEST_CACHE)/debootstrap HILOOP_TEST_IMAGES=$(TEST_CACHE)/images \
		$(GO) test -tags '$(DAEMON_TAGS)' -count=1 -timeout 3h -v -run '^(TestSoak|TestFlood)$$' ./internal/soak \
		-args -soak.kills=$(SOAK_KILLS) -soak.concurrency=$(SOAK_CONCURRENCY) -soak.seed=$(SOAK_SEED) \
		-flood.conns=$(FLOOD_CONNS) -flood.nofile=$(FLOOD_NOFILE) -flood.settle=20s

.PHONY: bench
bench: build ## measure exec, create, snapshot, fork, grow, SSH, sessions, the chat, egress and the model route against their references (docs/performance.md)
	bash bench/exec.sh
	bash bench/storage.sh
	bash bench/ssh.sh
	bash bench/sessions.sh
	bash bench/chat.sh
	bash bench/gateway.sh
	bash bench/route.sh

.PHONY: clean
clean: ## remove built binaries
	rm -rf $(BIN)
