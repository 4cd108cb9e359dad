# labctl: build, test, lint and release.
#   make build          bin/labctl, version from git describe (else "dev")
#   make test           every test: unit, integration (real kube-apiserver) and fuzz seeds
#   make lint           gofmt and go vet
#   make testbed        build etcd, kube-apiserver and kubectl into .testbed/bin
#   make fuzz           fuzz the config loader for $(FUZZTIME)
#   make bench          cold start of labctl version against kubectl version --client
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
TEST_TIMEOUT ?= 20m
FUZZTIME    ?= 2m
GORELEASER  ?= github.com/goreleaser/goreleaser/v2@v2.15.1

.PHONY: build test lint testbed fuzz bench release-check clean help

build: ## build bin/labctl
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .
	@echo "built $(BIN) ($(VERSION))"

# The test bed script prints progress on stderr and its folder on the last
# stdout line; envtest finds the binaries through KUBEBUILDER_ASSETS.
test: ## run every test; builds the test bed first when it is missing
	assets=$$(hack/testenv.sh | tail -n 1); \
	echo "KUBEBUILDER_ASSETS=$$assets"; \
	KUBEBUILDER_ASSETS=$$assets $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

lint: ## fail on unformatted files, then go vet
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need 'gofmt -w':"; echo "$$unformatted"; exit 1; \
	fi; \
	echo "gofmt: clean"
	$(GO) vet ./...

testbed: ## build etcd, kube-apiserver and kubectl into .testbed/bin when missing
	hack/testenv.sh

fuzz: ## fuzz the config loader (FUZZTIME=2m)
	$(GO) test -run '^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZTIME) ./internal/config

bench: ## compare cold start of labctl version with kubectl version --client
	hack/bench-coldstart.sh

release-check: ## validate .goreleaser.yaml
	$(GO) run $(GORELEASER) check

clean: ## remove build output (keeps the test bed)
	rm -rf bin dist

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'
