# labctl: build, test, lint and release.
#   make build          bin/labctl, version from git describe (else "dev")
#   make test           every test: unit, integration (real kube-apiserver), the
#                       libvirt driver on its own libvirtd (test:///default over
#                       unix, ssh and TLS) and on a real libvirtd booting a real
#                       VM (as root), and fuzz seeds
#   make lint           gofmt and go vet
#   make generate       the libvirt provider's deepcopy code and CRDs, by
#                       controller-gen (hack/generate.sh)
#   make testbed        build the whole test bed into .testbed/bin (the
#                       upstream sources into .testbed/src), and (as root)
#                       the real-VM test image into .cache/
#   make testbed-controllers  build the real controllers (Cluster API, CAPMOX,
#                       IPAM, operator, kube-controller-manager, kwok,
#                       cluster-autoscaler) into .testbed/bin (make test
#                       builds them too)
#   make bench-testbed  the whole test bed cold (empty build cache) and warm,
#                       side by side per go build (long: docs/testing.md)
#   make sim            a management cluster in a box and a fake Proxmox VE
#                       on loopback, for labctl by hand: prints a kubeconfig
#                       and a lab.yaml; Ctrl-C stops everything
#   make bench-libvirt  labctl's create-to-address time and its provider's
#                       Machine-to-VM time against plain virsh
#   make fuzz           fuzz the config loader for $(FUZZTIME)
#   make bench          cold start and peak RSS of labctl version (release build)
#                       against kubectl version --client
#   make release-check  goreleaser check

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# Use the machine's Go when it is not on PATH.
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif

GO          ?= go
MODULE      := github.com/labctl/labctl
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo none)
DATE        ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS     := -X $(MODULE)/internal/versions.Version=$(VERSION) \
               -X $(MODULE)/internal/versions.Commit=$(COMMIT) \
               -X $(MODULE)/internal/versions.Date=$(DATE)
BIN         ?= bin/labctl
TEST_TIMEOUT ?= 45m
# make test keeps its whole output here, and on a failure ends with what
# failed (hack/test-summary.sh): CI shows only the end of the output.
TEST_LOG    ?= .testbed/make-test.log
# Test binaries run at once. go test's default is one per CPU, and some
# packages mostly wait (internal/access sleeps out the API server's
# shortest token TTL, 10 min; the real-VM tests wait on TCG guests), so
# on 2 cores two waiting packages would hold up the rest.
TEST_P      ?= 4
FUZZTIME    ?= 2m
GORELEASER  ?= github.com/goreleaser/goreleaser/v2@v2.15.1

LVBED       := hack/libvirt-testbed

.PHONY: build test lint generate testbed testbed-controllers bench-testbed sim fuzz bench bench-libvirt release-check clean help

# Pure Go, as the releases are: the libvirt driver needs no cgo.
build: ## build bin/labctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .
	@echo "built $(BIN) ($(VERSION))"

# The test bed scripts print progress on stderr and their result on the
# last stdout line; envtest finds the binaries through KUBEBUILDER_ASSETS.
# The whole test bed is built, the real controllers too (docs/testing.md:
# cold, tens of minutes; warm, seconds).
# As root, the real-VM tests run too: the test image is built when missing,
# libvirtd is started, and stopped again whatever the tests do. Without root
# they skip (and fail under CI).
test: ## run every test; builds the test beds first when they are missing
	assets=$$(hack/testenv.sh all | tail -n 1); \
	echo "KUBEBUILDER_ASSETS=$$assets"; \
	if [ "$$(id -u)" = 0 ]; then \
		image=$$($(LVBED)/build-image.sh | tail -n 1); \
		export LABCTL_TESTBED_OWNER=$$$$; \
		trap '$(LVBED)/host-down.sh' EXIT; \
		$(LVBED)/host-up.sh; \
		export LABCTL_TEST_IMAGE=$$image LABCTL_REQUIRE_LIBVIRT=1; \
	else \
		echo "not root: the real-VM tests will skip (they need libvirtd)"; \
	fi; \
	mkdir -p $(dir $(TEST_LOG)); status=0; \
	KUBEBUILDER_ASSETS=$$assets $(GO) test -tags provider -count=1 -p $(TEST_P) -timeout $(TEST_TIMEOUT) ./... 2>&1 \
		| tee $(TEST_LOG) || status=$$?; \
	if [ $$status -ne 0 ]; then hack/test-summary.sh $(TEST_LOG); fi; \
	exit $$status

lint: ## fail on unformatted files, then go vet
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need 'gofmt -w':"; echo "$$unformatted"; exit 1; \
	fi; \
	echo "gofmt: clean"
	$(GO) vet ./...
	$(GO) vet -tags provider ./cmd/

generate: ## regenerate the libvirt provider's deepcopy code and CRDs (controller-gen)
	hack/generate.sh

testbed: ## build the test bed, the real controllers too (and, as root, the test image) when missing
	hack/testenv.sh all
	if [ "$$(id -u)" = 0 ]; then $(LVBED)/build-image.sh; fi

testbed-controllers: ## build the real controllers into .testbed/bin when missing (docs/testing.md)
	hack/testenv.sh controllers

bench-testbed: ## the test bed cold (empty build cache) and warm, side by side (long: see docs/testing.md)
	hack/bench-testbed.sh all

# The sim is a test (internal/testing/testbed/sim, TestSim) so that the
# box's cleanups stop every process. The test binary is built with go test
# -c and exec'd: it is then make's own child, in the terminal's process
# group, where Ctrl-C reaches it, and its exit status is the test's (go
# test itself exits 1 once it has seen an interrupt, even after a PASS).
sim: ## the box and a fake PVE for labctl by hand (docs/testing.md); Ctrl-C stops it
	assets=$$(hack/testenv.sh all | tail -n 1); \
	$(GO) test -c -o bin/sim.test ./internal/testing/testbed/sim/; \
	export KUBEBUILDER_ASSETS=$$assets LABCTL_SIM=1 LABCTL_REQUIRE_TESTBED=1 LABCTL_REQUIRE_CONTROLLERS=1; \
	exec bin/sim.test -test.run '^TestSim$$' -test.count=1 -test.timeout=0 -test.v

fuzz: ## fuzz the config loader (FUZZTIME=2m)
	$(GO) test -run '^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZTIME) ./internal/config

bench: ## compare cold start of labctl version with kubectl version --client
	hack/bench-coldstart.sh

bench-libvirt: ## labctl and its Cluster API provider vs plain virsh+genisoimage, on a real libvirtd (root)
	$(LVBED)/bench.sh

release-check: ## validate .goreleaser.yaml
	$(GO) run $(GORELEASER) check

clean: ## remove build output (keeps the test bed)
	rm -rf bin dist

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'
