# ctrlkit build entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go

# Control-plane versions; testenv.KubernetesVersion/EtcdVersion and the go.mod files embedded in
# testenv/internal/cpbuild say the same (a testenv unit test checks that they agree).
K8S_VERSION  := v1.36.3
ETCD_VERSION := v3.7.3
CP_DIR := $(CURDIR)/.cache/controlplane/kube-$(K8S_VERSION)_etcd-$(ETCD_VERSION)
export CTRLKIT_CONTROLPLANE_BIN := $(CP_DIR)

E2E_PKGS = $$($(GO) list -tags e2e ./... | grep '/e2e$$')

.PHONY: test unit modules e2e vet controlplane bench bench-short bench-server demo clean-controlplane

## test: vet, all unit tests with -race, the nested bench modules, then the end-to-end tests
## against a real control plane
test: vet unit modules e2e

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# The bench modules of their own: the report generator (its tests) and the controller-runtime
# comparison (it must keep building).
modules:
	cd bench/report && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd bench/controllerruntime && $(GO) vet ./...

e2e: controlplane
	$(GO) test -race -count=1 -timeout 30m -tags e2e $(E2E_PKGS)

## controlplane: build etcd and kube-apiserver from Go modules into .cache (no-op when present),
## with the command users of the module run: go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane
controlplane:
	@test -x $(CP_DIR)/etcd -a -x $(CP_DIR)/kube-apiserver || $(GO) run ./testenv/cmd/controlplane -dir $(CP_DIR)

clean-controlplane:
	rm -rf $(CURDIR)/.cache/controlplane

## bench: the whole side-by-side suite against client-go and controller-runtime, 10 rounds of
## the in-memory benchmarks and 5 against the control plane (about 44 minutes on 2 cores before
## the shard-scale, many-controller, read-your-writes and end-to-end latency phases, which add about 7, 1, 3 and 10;
## see bench/report/README.md), then bench/RESULTS.md, bench/results/*.png and the raw outputs
## in bench/results/raw (see bench/report). SHORT=1 is bench-short. Not part of test.
bench: controlplane
	cd bench/report && $(GO) run . $(if $(SHORT),-short)

## bench-short: the same suite in 1 round with -short inputs (about 5 minutes), reported in
## bench/results/short/RESULTS.md, for quick checks
bench-short: controlplane
	cd bench/report && $(GO) run . -short

## bench-server: only the informer sync of 50,000 ConfigMaps from a real apiserver, ctrlkit vs
## client-go (5,000 with SHORT=1); prints the results, leaves the report alone
bench-server: controlplane
	$(GO) test -tags e2e -run '^$$' -bench BenchmarkServerInformerSync -benchmem -benchtime 1x -count $(if $(SHORT),1,5) $(if $(SHORT),-short) -timeout 30m ./bench/

## demo: start a local control plane and watch objects change; leaves nothing running.
## REPLICAS=3 runs the controllers as 3 replicas that split the objects (manager.Config.Sharding)
demo: controlplane
	$(GO) run ./examples/demo $(if $(REPLICAS),-replicas $(REPLICAS))
