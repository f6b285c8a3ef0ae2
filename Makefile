# opr8r Makefile. Targets follow the house style:
# generate manifests fmt vet test test-integration verify.

SHELL := /usr/bin/env bash -o pipefail
ROOT := $(shell pwd)
# Built tools and binaries are cached by version outside the clone, so fresh
# clones (CI, worktrees) reuse them: $OPR8R_CACHE, default ~/.cache/opr8r.
CACHE ?= $(or $(OPR8R_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/opr8r)
export OPR8R_CACHE := $(CACHE)
KUBE_VERSION ?= 1.36.3
CONTROLLER_TOOLS_VERSION ?= v0.23.0
CONTROLLER_GEN := $(CACHE)/tools/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
ENVTEST_ASSETS := $(CACHE)/k8s/$(KUBE_VERSION)
HELM_VERSION ?= v3.19.0
HELM := $(CACHE)/tools/helm-$(HELM_VERSION)/helm
KUSTOMIZE_VERSION ?= v5.7.1
KUSTOMIZE := $(CACHE)/tools/kustomize-$(KUSTOMIZE_VERSION)/kustomize
TOFU_VERSION ?= 1.12.6
TOFU := $(CACHE)/tofu/$(TOFU_VERSION)/tofu
VERSITYGW_VERSION ?= 1.8.0
VERSITYGW := $(CACHE)/versitygw/$(VERSITYGW_VERSION)/versitygw
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
	$(CONTROLLER_GEN) rbac:roleName=opr8r-manager paths=./pkg/... output:rbac:artifacts:config=config/rbac
	hack/engine-manifests.sh $(CONTROLLER_GEN)
	$(MAKE) helm-sync

.PHONY: helm-sync
helm-sync: ## Copy the generated CRD, manager and user roles into the Helm chart (never edited twice; hack/engine-manifests.sh copies the engines' files).
	mkdir -p deploy/opr8r/crds deploy/opr8r/files/rbac
	cp config/crd/bases/*.yaml deploy/opr8r/crds/
	cp config/rbac/role.yaml deploy/opr8r/files/rbac/manager.yaml
	cat config/rbac/users/approver.yaml <(echo ---) config/rbac/users/editor.yaml <(echo ---) config/rbac/users/policy-admin.yaml > deploy/opr8r/templates/user-roles.yaml

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
	CGO_ENABLED=0 go build -o bin/kubectl-tfrun ./cmd/kubectl-tfrun

IMG ?= ghcr.io/opr8r/opr8r:latest
.PHONY: image
image: ## Build the operator image (manager + opr8r-step) with a container builder.
	docker build -t $(IMG) .

.PHONY: envtest-assets
envtest-assets: $(ENVTEST_ASSETS)/kube-apiserver ## Build kube-apiserver and install etcd for envtest.

$(ENVTEST_ASSETS)/kube-apiserver:
	KUBE_VERSION=$(KUBE_VERSION) hack/envtest-assets.sh

$(HELM):
	GOBIN=$(dir $(HELM)) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(KUSTOMIZE):
	GOBIN=$(dir $(KUSTOMIZE)) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

.PHONY: tools
tools: $(CONTROLLER_GEN) $(HELM) $(KUSTOMIZE) ## Build helm and kustomize for the install tests.

.PHONY: tofu
tofu: $(TOFU) ## Build OpenTofu for the step runner's tests.

$(TOFU):
	TOFU_VERSION=$(TOFU_VERSION) hack/opentofu.sh

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Build versitygw, the S3-compatible server the records store is tested against.

$(VERSITYGW):
	VERSITYGW_VERSION=$(VERSITYGW_VERSION) hack/versitygw.sh

##@ Test

.PHONY: test
test: envtest-assets tofu tools versitygw ## Unit, golden, step-runner (real git, terraform, OpenTofu, an OCI registry), records stores (a real S3 server), install and envtest integration tests.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) OPR8R_TOFU=$(TOFU) OPR8R_VERSITYGW=$(VERSITYGW) OPR8R_HELM=$(HELM) OPR8R_KUSTOMIZE=$(KUSTOMIZE) go test -timeout 30m $(GO_TEST_FLAGS) ./...

.PHONY: bench-shards
bench-shards: envtest-assets ## Sharding at scale (docs/performance.md): BENCH_SIZES runs over shards a, b, c and the default one, one manager each; runs reconciled by more than one shard, RSS per shard.
	go build -o bin/bench-manager ./cmd/manager
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) BENCH_SHARDS=1 BENCH_SIZES=$(BENCH_SIZES) go run ./test/bench

.PHONY: bench-e2e
bench-e2e: ## Latency on the from-source cluster (docs/performance.md): trivial runs per engine, one after another, 10 at once, Manual to plan, with each part and a one-pod floor (BENCH_E2E_N, _BURST, _MANUAL, _FLOOR, _ENGINES); table in bin/e2e/latency.md; then P10, terraform init with a real provider first against later (TestProviderCache's P10 lines).
	OPR8R_E2E_BENCH=1 E2E_RUN='^(TestLatencyBench|TestProviderCache)$$' test/e2e/run.sh

.PHONY: bench-rules
bench-rules: ## Plan rules at scale (docs/performance.md#plan-rules): the docs' rules on plans of 1,000, 20,000 and 100,000 changed resources.
	go test ./pkg/planpolicy/ -run '^$$' -bench BenchmarkDocRules -benchtime 5x -benchmem

.PHONY: bench-checks
bench-checks: envtest-assets ## Scheduled checks at scale (docs/performance.md): 1,000 runs, a 5m interval, 15 minutes; CPU and writes per check, the cap, the longest wait.
	go build -o bin/bench-manager ./cmd/manager
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) BENCH_CHECKS=1 go run ./test/bench

.PHONY: test-integration
test-integration: envtest-assets ## Only the envtest integration suite.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -timeout 30m $(GO_TEST_FLAGS) ./test/integration/... -ginkgo.v

.PHONY: docs
docs: ## Regenerate docs/api-reference.md from the CRD.
	go run ./hack/gen-api-docs > docs/api-reference.md

.PHONY: e2e-cluster
e2e-cluster: ## Bring up a single-node cluster built from source, with Argo, Tekton and opr8r (test/e2e/cluster.sh; needs root).
	test/e2e/cluster.sh up

.PHONY: e2e-down
e2e-down: ## Stop the e2e cluster and remove every trace of it.
	test/e2e/cluster.sh down

.PHONY: e2e
e2e: ## Real end-to-end on that cluster: every engine, real pods, real terraform, then the faults of make chaos (E2E_KEEP=1 keeps the cluster; E2E_RUN=regex focuses).
	test/e2e/run.sh

.PHONY: chaos
chaos: ## Faults on the real cluster (docs/reliability.md): a step pod killed mid-apply, the manager killed in each phase, the engines' controllers and the API server restarted; writes the fault table to bin/e2e/chaos-table.md.
	E2E_SCENARIOS=chaos test/e2e/run.sh

BENCH_SIZES ?= 100,1000,5000
.PHONY: bench
bench: envtest-assets ## Scale benchmark (docs/performance.md): throughput, latency, writes and memory at BENCH_SIZES runs.
	go build -o bin/bench-manager ./cmd/manager
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) BENCH_SIZES=$(BENCH_SIZES) go run ./test/bench

FUZZ_TIME ?= 5m
.PHONY: fuzz
fuzz: ## Fuzz translation of admission-valid specs through both engines' validators.
	go test ./engines/ -run='^$$' -fuzz=FuzzTranslate -fuzztime=$(FUZZ_TIME)

.PHONY: update-golden
update-golden: ## Rewrite the translators' golden files.
	go test ./engines/... -update

.PHONY: verify
verify: generate manifests ## Fail if generated files are stale.
	go mod tidy
	gofmt -l . | (! grep .) || (echo "gofmt: files above need formatting" && false)
	go run ./hack/gen-api-docs > docs/api-reference.md
	git diff --exit-code -- api config deploy docs go.mod go.sum || (echo "generated files are stale: run make generate manifests docs and commit" && false)
	@test -z "$$(git status --porcelain -- api config deploy docs)" || (git status --porcelain -- api config deploy docs; echo "untracked generated files: commit them" && false)

##@ Run

.PHONY: dev
dev: ## One-command local start: a real apply on the from-source cluster when this machine can run it, else a local control plane (DEV_ENVTEST=1 forces it; with KUBECONFIG set: the manager on that cluster).
	@if [ -n "$$KUBECONFIG" ]; then \
	  echo "==> KUBECONFIG is set: running the manager against $$KUBECONFIG (CRDs installed first; default engine: Argo, else Tekton, else plain Jobs, whichever the cluster has)"; \
	  go run ./cmd/manager --install-crds --default-engine=auto; \
	elif [ -z "$(DEV_ENVTEST)" ] && test/e2e/cluster.sh can-run; then \
	  echo "==> bringing up the single-node cluster built from source (test/e2e/cluster.sh; the first run builds it, later ones take about a minute)"; \
	  test/e2e/dev.sh; \
	else \
	  echo "==> this machine cannot run the container cluster (needs root and cgroups), or DEV_ENVTEST is set: local control plane only, no engine controller"; \
	  $(MAKE) --no-print-directory envtest-assets && \
	  go build -o bin/kubectl-tfrun ./cmd/kubectl-tfrun && \
	  KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go run ./cmd/opr8r-dev $(DEV_FLAGS); \
	fi

.PHONY: run
run: ## Run the manager against the current kubeconfig (installs the CRD).
	go run ./cmd/manager --install-crds
