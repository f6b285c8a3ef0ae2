# opr8r Makefile. Targets follow the house style:
# generate manifests fmt vet test test-integration verify.

SHELL := /usr/bin/env bash -o pipefail
ROOT := $(shell pwd)
KUBE_VERSION ?= 1.36.3
CONTROLLER_TOOLS_VERSION ?= v0.23.0
CONTROLLER_GEN := $(ROOT)/bin/tools/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
ENVTEST_ASSETS := $(ROOT)/bin/k8s/$(KUBE_VERSION)
TOFU_VERSION ?= 1.12.6
TOFU := $(ROOT)/bin/tofu/$(TOFU_VERSION)/tofu
GO_TEST_FLAGS ?=

.PHONY: all
all: build

##@ Development

$(CONTROLLER_GEN):
	GOBIN=$(dir $(CONTROLLER_GEN)) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD into config/crd/bases and RBAC into config/rbac.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=opr8r-manager paths="./pkg/...;./pipelines/..." output:rbac:artifacts:config=config/rbac

.PHONY: fmt
fmt:
	go fmt ./...

.PHONY: vet
vet:
	go vet ./...

.PHONY: build
build: ## Build the manager and the step runner.
	CGO_ENABLED=0 go build -o bin/manager ./cmd/manager
	CGO_ENABLED=0 go build -o bin/opr8r-step ./cmd/opr8r-step

IMG ?= ghcr.io/opr8r/opr8r:latest
.PHONY: image
image: ## Build the operator image (manager + opr8r-step) with a container builder.
	docker build -t $(IMG) .

.PHONY: envtest-assets
envtest-assets: $(ENVTEST_ASSETS)/kube-apiserver ## Build kube-apiserver and install etcd for envtest.

$(ENVTEST_ASSETS)/kube-apiserver:
	KUBE_VERSION=$(KUBE_VERSION) hack/envtest-assets.sh

.PHONY: tofu
tofu: $(TOFU) ## Build OpenTofu for the step runner's tests.

$(TOFU):
	TOFU_VERSION=$(TOFU_VERSION) hack/opentofu.sh

##@ Test

.PHONY: test
test: envtest-assets tofu ## Unit, golden, step-runner (real git, terraform, OpenTofu) and envtest integration tests.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) OPR8R_TOFU=$(TOFU) go test $(GO_TEST_FLAGS) ./...

.PHONY: test-integration
test-integration: envtest-assets ## Only the envtest integration suite.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test $(GO_TEST_FLAGS) ./test/integration/... -ginkgo.v

.PHONY: update-golden
update-golden: ## Rewrite the translators' golden files.
	go test ./pipelines/... -update

.PHONY: verify
verify: generate manifests ## Fail if generated files are stale.
	go mod tidy
	gofmt -l . | (! grep .) || (echo "gofmt: files above need formatting" && false)
	git diff --exit-code -- api config go.mod go.sum || (echo "generated files are stale: run make generate manifests and commit" && false)
	@test -z "$$(git status --porcelain -- api config)" || (git status --porcelain -- api config; echo "untracked generated files: commit them" && false)

##@ Run

.PHONY: dev
dev: envtest-assets ## One-command local start: a local control plane, the manager and an example run.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go run ./cmd/opr8r-dev $(DEV_FLAGS)

.PHONY: run
run: ## Run the manager against the current kubeconfig (installs the CRD).
	go run ./cmd/manager --install-crds
