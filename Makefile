# ratelimitd: `make help` lists the targets.
GO      ?= go
TOOL    := $(GO) tool -modfile=tools/buf/go.mod
LINT    := $(GO) tool -modfile=tools/lint/go.mod
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
BIN     := bin/ratelimitd
CONFIG  ?= examples/config.yaml

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/ratelimitd
	$(GO) build -ldflags "-X main.mainVersion=$(VERSION)" -o $(BIN) ./cmd/ratelimitd

.PHONY: dist
dist: ## the release artifacts into dist/: ratelimitd for linux/amd64 and arm64, the Helm chart, the Python and Node packages, SHA256SUMS (see .ci/dist)
	rm -rf dist
	VERSION=$(VERSION) bash .ci/dist dist

.PHONY: test-dist
test-dist: dist ## install each artifact of make dist in a clean directory and smoke-test it (see .ci/test-dist)
	VERSION=$(VERSION) bash .ci/test-dist dist

.PHONY: docker
docker: ## build the container image ratelimitd:$(VERSION) (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t ratelimitd:$(VERSION) .

.PHONY: run
run: build ## start ratelimitd on the memory store with examples/config.yaml
	$(BIN) --config $(CONFIG)

.PHONY: deps
deps: ## install Redis, Chromium (the page's browser test), promtool (the alerts' tests), and Python, protoc and Node for the Python and Node packages, when missing (apt)
	bash .ci/install-redis
	bash .ci/install-chromium
	bash .ci/install-promtool
	bash .ci/install-polyglot

.PHONY: test
test: deps build ## every test: Go with the race detector (the page's screenshot in bin/test-artifacts), the Go client (newest dependencies; Go 1.25 with the lowest), deploy/ (chart, dashboard, alerts), the Python and Node packages, the release artifacts (built in bin/dist)
	TEST_ARTIFACTS=$(CURDIR)/bin/test-artifacts $(GO) test -race -shuffle=on -count=1 ./...
	bash .ci/test-go-client
	RATELIMITD_BIN=$(CURDIR)/$(BIN) bash .ci/test-deploy
	RATELIMITD_BIN=$(CURDIR)/$(BIN) bash .ci/test-python
	RATELIMITD_BIN=$(CURDIR)/$(BIN) bash .ci/test-node
	rm -rf bin/dist
	VERSION=$(VERSION) bash .ci/dist bin/dist
	VERSION=$(VERSION) bash .ci/test-dist bin/dist

.PHONY: check
check: fmt vet lint breaking check-generate tidy layers ## every static check CI runs

.PHONY: fmt
fmt: ## fail if gofmt would change a file (of every module, client/ included; gen/ is generated)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); \
	if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet, in ratelimitd's module and in the gen/, client/ and deploy/ modules
	$(GO) vet ./...
	cd gen && $(GO) vet ./...
	cd client && $(GO) vet ./...
	cd deploy && $(GO) vet ./...

.PHONY: lint
lint: ## golangci-lint (.golangci.yml) here, in client/ and in deploy/, then buf lint and buf format on proto/
	$(LINT) golangci-lint run
	cd client && $(GO) tool -modfile=../tools/lint/go.mod golangci-lint run
	cd deploy && $(GO) tool -modfile=../tools/lint/go.mod golangci-lint run
	$(TOOL) buf lint
	$(TOOL) buf format --diff --exit-code

.PHONY: breaking
breaking: ## buf breaking against main, when this checkout has it
	@if git rev-parse -q --verify main >/dev/null; then $(TOOL) buf breaking --against '.git#branch=main'; \
	else echo "no main branch here: skipping buf breaking"; fi

.PHONY: generate
generate: ## regenerate gen/: the Go stubs from proto/, the Python and Node stubs of both APIs
	rm -rf gen/ratelimit
	$(TOOL) buf generate
	bash .ci/generate-python
	bash .ci/generate-node

.PHONY: layers
layers: ## fail if an import runs up a floor: the engine without gRPC or net/http, nothing below server importing it, no command under internal/ (see .ci/check-layers)
	bash .ci/check-layers

.PHONY: check-generate
check-generate: generate ## fail if gen/ is not what proto/ generates
	@git diff --exit-code -- gen || { echo "gen/ is stale: run make generate and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- gen)" || { git status --porcelain -- gen; echo "gen/ has files proto/ does not generate"; exit 1; }

.PHONY: tidy
tidy: ## fail if a go.mod or go.sum (the product's, gen/'s, client/'s, deploy/'s, golangci-lint's, Helm's) is not tidy
	$(GO) mod tidy -diff
	cd gen && $(GO) mod tidy -diff
	cd client && $(GO) mod tidy -diff
	cd deploy && $(GO) mod tidy -diff
	cd tools/lint && $(GO) mod tidy -diff
	cd tools/helm && $(GO) mod tidy -diff

.PHONY: bench
bench: ## run the Go benchmarks
	$(GO) test -run='^$$' -bench=. -benchmem ./...

.PHONY: bench-load
bench-load: deps ## load-test ratelimitd (memory, Redis, Redis Cluster) beside a baseline on Redis (see .ci/bench-load)
	bash .ci/bench-load

.PHONY: fuzz
fuzz: ## fuzz the config parser for 30 seconds
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=30s ./config

.PHONY: clean
clean: ## remove build output
	rm -rf bin dist
