# ctrlkit build entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go

# Control-plane versions; testenv.KubernetesVersion/EtcdVersion and tools/*/go.mod say the same
# (a testenv unit test checks that they agree).
K8S_VERSION  := v1.36.3
ETCD_VERSION := v3.7.3
CP_DIR := $(CURDIR)/.cache/controlplane/kube-$(K8S_VERSION)_etcd-$(ETCD_VERSION)
export CTRLKIT_CONTROLPLANE_BIN := $(CP_DIR)

E2E_PKGS = $$($(GO) list -tags e2e ./... | grep '/e2e$$')

.PHONY: test unit e2e vet controlplane bench bench-server demo clean-controlplane

## test: vet, all unit tests with -race, then the end-to-end tests against a real control plane
test: vet unit e2e

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

e2e: controlplane
	$(GO) test -race -count=1 -timeout 30m -tags e2e $(E2E_PKGS)

## controlplane: build etcd and kube-apiserver from Go modules into .cache (no-op when present)
controlplane: $(CP_DIR)/etcd $(CP_DIR)/kube-apiserver

$(CP_DIR)/etcd:
	@mkdir -p $(CP_DIR)
	cd tools/etcd && $(GO) build -trimpath -o $(CP_DIR)/etcd.partial . && mv $(CP_DIR)/etcd.partial $@

$(CP_DIR)/kube-apiserver:
	@mkdir -p $(CP_DIR)
	cd tools/kube-apiserver && $(GO) build -trimpath -o $(CP_DIR)/kube-apiserver.partial . && mv $(CP_DIR)/kube-apiserver.partial $@

clean-controlplane:
	rm -rf $(CURDIR)/.cache/controlplane

## bench: side-by-side benchmarks against client-go (not part of test)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 -timeout 60m ./bench/

## bench-server: informer sync of 50,000 ConfigMaps from a real apiserver, ctrlkit vs client-go
bench-server: controlplane
	$(GO) test -tags e2e -run '^$$' -bench BenchmarkServerInformerSync -benchtime 1x -count 5 -timeout 30m ./bench/

## demo: start a local control plane and watch objects change; leaves nothing running
demo: controlplane
	$(GO) run ./examples/demo
