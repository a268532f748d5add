# gpushare: run `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
BIN := bin
# go-nvml's cgo preamble calls NVML functions the header marks deprecated.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# Tools are built from the Go module proxy into a versioned cache outside
# the clone, so that every clone on a machine shares them.
TOOLS_DIR ?= $(HOME)/.cache/gpushare/tools
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# Every tool is named before any rule: make reads a rule's prerequisites
# as it meets them, and a name defined further down is empty there.
# helm's and Prometheus' versions are hack/tools/go.mod's: they are built
# from that module, with the control plane.
tools_version = $(shell sed -n 's|^[[:space:]]$(1) \(v[^ ]*\).*|\1|p' hack/tools/go.mod)
HELM_VERSION := $(call tools_version,helm.sh/helm/v4)
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)
PROMETHEUS_VERSION := $(call tools_version,github.com/prometheus/prometheus)
# Its release: module v0.316.0 is Prometheus 3.16.0.
PROMETHEUS_RELEASE := $(patsubst 3%,3.%,$(word 2,$(subst ., ,$(PROMETHEUS_VERSION)))).$(word 3,$(subst ., ,$(PROMETHEUS_VERSION)))
PROMETHEUS := $(TOOLS_DIR)/prometheus-$(PROMETHEUS_VERSION)
PROMTOOL := $(TOOLS_DIR)/promtool-$(PROMETHEUS_VERSION)
KUEUE_VERSION := v0.17.0
KUEUE := $(TOOLS_DIR)/kueue-$(KUEUE_VERSION)

# The openb trace (Alibaba cluster-trace-gpu-v2023); see docs/simulator.md.
OPENB ?= ../shared/traces/openb
SEEDS ?= 42-51
FUZZTIME ?= 10s

# The version stamped into the binaries (--version) and the images' tag:
# the v* tag at HEAD, or else a pseudo-version of HEAD (hack/image/version.sh).
VERSION ?= $(shell hack/image/version.sh 2>/dev/null)
LDFLAGS = -X github.com/gpushare/gpushare/pkg/version.version=$(VERSION) \
	-X github.com/gpushare/gpushare/pkg/version.commit=$(shell git rev-parse HEAD 2>/dev/null)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build every binary into bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

.PHONY: images
images: ## Build the gpushare-scheduler, gpushare-extender and gpushare-node images into bin/images/ (docs/images.md).
	$(SHARED_BUILD) $(GO) -C hack/image run . --out $(BIN)/images --version=$(VERSION)

.PHONY: release
release: $(HELM) ## Release VERSION=vX.Y.Z: images tagged VERSION, into bin/release/ the chart (appVersion VERSION) and the kubectl plugin's archives, sha256 files and krew manifest.
	@case "$(origin VERSION)" in "command line"|environment) ;; *) echo "make release needs VERSION=vX.Y.Z" >&2; exit 1;; esac
	HELM=$(HELM) hack/release.sh $(VERSION) $(BIN)/release

.PHONY: image-test
image-test: ## Build the images twice (same digests?) and run each one's --version inside it (needs root or user namespaces).
	$(SHARED_BUILD) $(GO) -C hack/image test -count=1 -timeout 20m ./...

# The shared build: static (no cgo) and -trimpath, as the images' static
# commands are built (hack/image). make demo-build, the control plane
# (hack/cluster-tools.sh, the same flags), the integration tests and the
# images then compile each package they have in common once: a cold make
# test builds the images from what the control plane and the tests
# compiled. The unit tests (-race needs cgo), the GPU check and make build
# (the node daemon's NVML) keep cgo; the demo's node daemons simulate
# their GPUs and need no NVML.
#
# No DWARF (NODWARF): the compiler then spends about a fifth less time on
# a cold build, and the code it writes is the same. The images and the
# control plane are linked without DWARF anyway (-s -w); what panics,
# profiles and the race detector print comes from the symbol table Go
# keeps without it. A debugger needs it: a GOFLAGS given to make comes
# after NODWARF, and a later -gcflags=all=... wins.
NODWARF := -gcflags=all=-dwarf=false
SHARED_BUILD = CGO_ENABLED=0 GOFLAGS="-trimpath $(NODWARF) $${GOFLAGS:-}"
# The unit tests' flags, which make lint gives golangci-lint too: it
# compiles every package for its types (go list -export), and with the
# same flags those are the packages the unit tests then link, not a second
# build of the module and its dependencies. The GPU check builds with cgo
# and -trimpath, as the gpushare-node image: NODWARF too, for the same
# reason.
UNIT_FLAGS := -race $(NODWARF)

# What the demo runs, built in one go build: not the simulator or the
# extender, which it never starts.
DEMO_CMDS := gpushare-demo gpushare-scheduler gpushare-node gpushare-dra gpushare-webhook kubectl-inspect-gpushare

.PHONY: demo-build
demo-build:
	$(SHARED_BUILD) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ $(DEMO_CMDS:%=./cmd/%)

.PHONY: demo
demo: demo-build cluster-tools ## Start the local GPU cluster, schedule the seed examples, print where they landed.
	@# The real node's workload; without it the demo says why it has no real node.
	-$(SHARED_BUILD) $(GO) -C hack/image run . --out $(BIN)/images --images=gpushare-probe --version=demo
	$(BIN)/gpushare-demo up

.PHONY: demo-down
demo-down: demo-build ## Stop the local GPU cluster.
	$(BIN)/gpushare-demo down

.PHONY: sim
sim: build ## Run the packing simulator on its built-in synthetic workload.
	$(BIN)/gpushare-sim --seeds $(SEEDS)

# The control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl v1.37.2 and kwok v0.8.0), built from the Go module
# proxy into a versioned cache outside the clone.
CLUSTER_TOOLS ?= $(HOME)/.cache/gpushare/cluster-v1.37.2
export GPUSHARE_CLUSTER_TOOLS := $(CLUSTER_TOOLS)

.PHONY: test
# The checks that only compute (lint, the GPU check against its fake,
# fuzzing a number of inputs per target, the images) run beside the tests
# that wait (hack/test-beside.sh), at the lowest CPU priority: they take
# the CPU those leave idle (a control plane starting, a kubelet, builds'
# serial stretches). They start after unit, whose -race build lint
# shares.
test: unit ## Run every test: lint, unit tests with -race, the GPU check against the NVML fake, brief fuzzing, integration tests on a real control plane, the real node, the images.
	@MAKE="$(MAKE)" hack/test-beside.sh lint gpu-check-fake fuzz FUZZTIME=inputs image-test -- integration chart-test node-test

.PHONY: unit
unit: ## Unit and property tests with the race detector.
	GOFLAGS="$(UNIT_FLAGS) $${GOFLAGS:-}" $(GO) test -count=1 $$($(GO) list ./... | grep -v -e /test/integration -e /test/gpucheck)

# The GPU check (docs/gpu-check.md): the node daemon's NVML, health
# events, usage sampling and MPS supervisor on this machine's GPUs
# (GPU=nvml), or against go-nvml's mock NVML and stand-ins (GPU=fake);
# GPU=auto picks nvml where an NVIDIA driver is installed. One JSON line
# on stdout.
GPU ?= auto

.PHONY: gpu-check
gpu-check: ## The node daemon's GPU code on this machine's GPU, no Kubernetes: NVML against nvidia-smi, health events, usage, MPS limits; one JSON line (GPU=auto|nvml|fake).
	@GOFLAGS="$(NODWARF) $${GOFLAGS:-}" hack/gpu-check.sh $(GPU)

.PHONY: gpu-check-build
gpu-check-build: ## Build the GPU check into bin/gpucheck.test, for a GPU machine without Go (GPU_CHECK_BINARY=bin/gpucheck.test hack/gpu-check.sh there).
	@mkdir -p bin
	CGO_ENABLED=1 GOFLAGS="$(NODWARF) $${GOFLAGS:-}" $(GO) test -c -trimpath -tags gpucheck -o bin/gpucheck.test ./test/gpucheck

.PHONY: gpu-check-fake
gpu-check-fake: ## make gpu-check against the NVML fake and stand-ins (part of make test).
	@GOFLAGS="$(NODWARF) $${GOFLAGS:-}" hack/gpu-check.sh fake

# Helm, built from the Go module proxy into the tools cache: from the tools
# module (hack/tools), with the shared build's flags, so that the
# Kubernetes client libraries, kubectl's and the rest it shares with the
# control plane are compiled once (four fifths of its packages).
export GPUSHARE_HELM := $(HELM)

$(HELM):
	@mkdir -p $(TOOLS_DIR)
	cd hack/tools && $(SHARED_BUILD) $(GO) build -o $(abspath $@).tmp \
		-ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" helm.sh/helm/v4/cmd/helm
	mv $@.tmp $@

.PHONY: helm
helm: $(HELM) ## Build the pinned helm into the tools cache.

# Prometheus and promtool (3.16.0: module v0.316.0), built from the Go
# module proxy into the tools cache as helm is, from the tools module with
# the shared build's flags (three fifths of their packages are the control
# plane's), without the web UI's assets and with static targets as the
# only service discovery: test/integration/monitoring_test.go scrapes the
# components on loopback and runs every dashboard and alert query.
export GPUSHARE_PROMETHEUS := $(PROMETHEUS)
export GPUSHARE_PROMTOOL := $(PROMTOOL)
export GPUSHARE_KUEUE := $(KUEUE)

$(PROMETHEUS) $(PROMTOOL) &:
	@mkdir -p $(TOOLS_DIR)/.build-prometheus
	cd hack/tools && $(SHARED_BUILD) $(GO) build -o $(abspath $(TOOLS_DIR))/.build-prometheus/ -tags remove_all_sd \
		-ldflags "-s -w -X github.com/prometheus/common/version.Version=$(PROMETHEUS_RELEASE)" \
		github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
	mv $(TOOLS_DIR)/.build-prometheus/prometheus $(PROMETHEUS)
	mv $(TOOLS_DIR)/.build-prometheus/promtool $(PROMTOOL)

.PHONY: prometheus
prometheus: $(PROMETHEUS) $(PROMTOOL) ## Build the pinned prometheus and promtool into the tools cache.

$(KUEUE):
	hack/kueue.sh $(KUEUE_VERSION) $(KUEUE)

.PHONY: kueue
kueue: $(KUEUE) ## Build the pinned Kueue, its CRDs and webhooks into the tools cache.

# How many integration tests run at once, each on its own control plane.
# Most of a test waits (for a control plane to start, a watch, a lease),
# and one at a time leaves half of two cores idle; the tests that time
# what they watch (failover, soak, a check each second) run alone first.
INTEGRATION_PARALLEL ?= 2

# After the tools' variables: make expands a rule's prerequisites as it
# reads the rule.
.PHONY: integration
integration: cluster-tools $(PROMETHEUS) $(PROMTOOL) $(KUEUE) ## Integration tests on a real control plane (builds it on first use); the chart's are chart-test's.
	$(SHARED_BUILD) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -count=1 -timeout 30m -parallel $(INTEGRATION_PARALLEL) -v -skip '^TestChart|^TestRealNode' ./test/integration/... 2>&1 | grep -v '^=== \(RUN\|PAUSE\|CONT\)'

.PHONY: rules
rules: $(PROMTOOL) ## Check the alerts (promtool check rules) and run their unit tests.
	$(PROMTOOL) check rules charts/gpushare/files/alerts.yaml
	$(PROMTOOL) test rules charts/gpushare/files/alerts_test.yaml

.PHONY: chart-test
chart-test: cluster-tools $(HELM) ## The Helm chart: lint, render every toggle, install on a real control plane and run what it deploys.
	$(SHARED_BUILD) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -count=1 -timeout 30m -parallel $(INTEGRATION_PARALLEL) -v -run '^TestChart' ./test/integration/... 2>&1 | grep -v '^=== \(RUN\|PAUSE\|CONT\)'

.PHONY: node-test
node-test: cluster-tools $(HELM) ## The real node (root): kubelet, containerd and runc start the seed examples from gpushare's chart and images (docs/real-node.md).
	$(SHARED_BUILD) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -count=1 -timeout 20m -v -run '^TestRealNode' ./test/integration/... 2>&1 | grep -v '^=== \(RUN\|PAUSE\|CONT\)'

.PHONY: manifests
manifests: $(HELM) ## Render deploy/'s RBAC and policies from the chart (chart-test fails when they drift).
	HELM=$(HELM) hack/manifests.sh deploy

.PHONY: cluster-tools
cluster-tools: ## Build the control plane binaries (cold: several minutes; then seconds).
	hack/cluster-tools.sh $(CLUSTER_TOOLS)

# Older control planes gpushare-extender is tested against: each minor's
# kube-apiserver, kube-controller-manager and kube-scheduler are built from
# its tools module hack/compat/MINOR into ~/.cache/gpushare/cluster-PATCH.
# The hook policy subtest is left out: MutatingAdmissionPolicy needs 1.36.
COMPAT_VERSIONS ?= v1.33 v1.34 v1.35 v1.36

.PHONY: compat
compat: cluster-tools ## The extender's seed test on older control planes (COMPAT_VERSIONS; cold: minutes per minor).
	@for v in $(COMPAT_VERSIONS); do \
		dir=$$(hack/compat-tools.sh $$v); \
		echo "compat $$v: $$dir"; \
		$(SHARED_BUILD) GPUSHARE_CLUSTER_TOOLS=$$dir GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -count=1 -timeout 15m \
			-run 'TestSeedsExtender/nodeCacheCapable=true' ./test/integration/; \
	done

.PHONY: fuzz
fuzz: ## Run each fuzz target of every package for FUZZTIME (default 10s; inputs: hack/fuzz.sh's number per target, as make test), from the seed corpus.
	GO=$(GO) GOFLAGS="$(NODWARF) $${GOFLAGS:-}" FUZZTIME=$(FUZZTIME) hack/fuzz.sh

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (installs the pinned version), and check that the control plane's build shares gpushare's module versions.
	GOFLAGS="$(UNIT_FLAGS) $${GOFLAGS:-}" $(GOLANGCI_LINT) run ./...
	hack/shared-versions.sh

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR)/.build GOFLAGS="$(NODWARF) $${GOFLAGS:-}" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS_DIR)/.build/golangci-lint $@

.PHONY: bench-core
bench-core: ## Go benchmarks of the allocation core (filter+score over 5000 nodes x 8 GPUs).
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./pkg/alloc

.PHONY: bench-packing
bench-packing: build ## Packing benchmark: every policy on all 17 openb workloads (needs OPENB).
	@test -f $(OPENB)/openb_node_list_gpu_node.csv || { echo "openb trace not found in $(OPENB); see docs/simulator.md" >&2; exit 1; }
	hack/bench-packing.sh $(OPENB) $(SEEDS)

.PHONY: bench-default
bench-default: build ## Packing benchmark on the openb default workload only.
	@test -f $(OPENB)/openb_node_list_gpu_node.csv || { echo "openb trace not found in $(OPENB); see docs/simulator.md" >&2; exit 1; }
	$(BIN)/gpushare-sim --nodes $(OPENB)/openb_node_list_gpu_node.csv --pods $(OPENB)/openb_pod_list_default.csv --seeds $(SEEDS) --plot $(BIN)/curve-default.png

.PHONY: bench-churn
bench-churn: build ## Churn: the openb default trace arriving and leaving at 0.9 and 1.0 offered load, the default policy with and without defragmentation (CHURN_SEEDS, default 42-44).
	@test -f $(OPENB)/openb_node_list_gpu_node.csv || { echo "openb trace not found in $(OPENB); see docs/simulator.md" >&2; exit 1; }
	for load in 0.9 1.0; do for defrag in "" --defrag; do \
		$(BIN)/gpushare-sim --nodes $(OPENB)/openb_node_list_gpu_node.csv --pods $(OPENB)/openb_pod_list_default.csv \
			--policy fgd-robust --workload online --churn --load $$load $$defrag --seeds $(CHURN_SEEDS) || exit 1; \
	done; done

# bench-churn's seeds: SEEDS when given, else 42-44 (a replay with moves takes minutes).
CHURN_SEEDS = $(if $(filter environment command line,$(origin SEEDS)),$(SEEDS),42-44)

.PHONY: bench-scheduler
bench-scheduler: cluster-tools ## Scheduling throughput and memory: gpushare-scheduler, stock kube-scheduler and the extender (NODES, PODS).
	$(SHARED_BUILD) $(GO) run ./test/bench/scheduler --nodes $(or $(NODES),1000,5000) --pods $(or $(PODS),10000)

.PHONY: bench-replay
bench-replay: cluster-tools ## The openb default trace through gpushare-scheduler on 1213 kwok nodes vs gpushare-sim, per seed (SEEDS, default 42-44; OPENB; REPLAY_FLAGS, e.g. --until 100).
	$(SHARED_BUILD) $(GO) run ./test/bench/replay --openb $(OPENB) --seeds $(REPLAY_SEEDS) $(REPLAY_FLAGS)

# bench-replay's seeds: SEEDS when given, else 42-44 (a replay takes minutes).
REPLAY_SEEDS = $(if $(filter environment command line,$(origin SEEDS)),$(SEEDS),42-44)

.PHONY: bench-deviceplugin
bench-deviceplugin: cluster-tools ## Device plugin latency with 100 pods starting at once: gpushare-node as its own process (ROUNDS).
	$(SHARED_BUILD) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -run '^$$' -bench DevicePluginStart100 -benchtime $(or $(ROUNDS),5)x -timeout 30m ./test/integration

.PHONY: bench-inspect
bench-inspect: cluster-tools ## kubectl inspect gpushare on 5000 nodes x 8 GPUs and 40000 pods against a real apiserver (ROUNDS).
	$(SHARED_BUILD) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -run '^$$' -bench '^BenchmarkInspect$$' -benchtime $(or $(ROUNDS),5)x -timeout 30m ./test/integration

.PHONY: bench-usage
bench-usage: cluster-tools ## Live GPU use from 5000 nodes' publishers, on the Node (before) and on the Lease (after): apiserver CPU and watch events.
	$(SHARED_BUILD) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -run '^$$' -bench '^BenchmarkUsagePublishing5000$$' -benchtime 1x -timeout 30m ./test/integration

.PHONY: soak
soak: cluster-tools ## Churn soak, 30 minutes on 50 nodes: scheduler, node daemons and kube-apiserver killed under load (the short version is in integration).
	$(SHARED_BUILD) GPUSHARE_SOAK=$(or $(SOAK),30m) GPUSHARE_REQUIRE_CLUSTER=1 $(GO) test -count=1 -run '^TestSoak$$' -timeout 45m -v ./test/integration 2>&1 | grep -v '^=== \(RUN\|PAUSE\|CONT\)'

.PHONY: clean
clean: ## Remove build outputs.
	rm -rf $(BIN)
