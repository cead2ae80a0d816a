# webhook-dedup: build, test, lint. `make test` is the whole test suite; it
# installs what the tests need (redis-server and postgresql from Debian,
# dynalite from npm)
# when it is missing.

GO       ?= go
FUZZTIME ?= 30000x
# The version is written in one place, the VERSION file (X.Y.Z-dev between
# releases); the binary embeds it, and stamping it here only lets
# `make build VERSION=…` override it. The commit is stamped apart: the
# abbreviated hash, "-dirty" with uncommitted changes.
VERSION  ?= $(shell cat VERSION)
COMMIT   ?= $(shell git describe --always --dirty --abbrev=7 --exclude='*' 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STATICCHECK_VERSION := v0.8.2
# kustomize renders k8s/ in its tests. Debian's kubectl (1.20) is too old;
# v5.8.3 needs Go 1.27, so v5.8.2.
KUSTOMIZE_VERSION := v5.8.2
# helm renders and lints charts/ in k8s/'s tests; building it takes minutes
# on two cores, so it is installed only when missing.
HELM_VERSION       := v4.3.2
# actionlint checks .github/workflows in k8s/release_test.go.
ACTIONLINT_VERSION := v1.7.12
DYNALITE_VERSION  := 4.0.0

.PHONY: build test deps lint fuzz ci bench soak release publish

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o webhook-dedup .

# A release, in DIST: for each of PLATFORMS a tarball
# webhook-dedup_VERSION_OS_ARCH.tar.gz holding the static binary (version
# and commit stamped) with LICENSE and README.md; the chart packaged as
# webhook-dedup-VERSION.tgz with its version and appVersion (the image tag
# it runs) set to VERSION; and checksums.txt, their sha256. The tarballs
# are reproducible: sorted, owned by 0, dated at the commit.
# .github/workflows/release.yml runs this on a tag, then `make publish`;
# k8s/release_test.go runs it for one platform.
DIST      ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
HELM      ?= $(shell command -v helm || echo "$$($(GO) env GOPATH)/bin/helm")
MTIME     := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

release:
	@echo "$(VERSION)" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$' || { echo "VERSION=$(VERSION) is not X.Y.Z[-pre]"; exit 1; }
	mkdir -p $(DIST) && rm -f $(DIST)/webhook-dedup_* $(DIST)/webhook-dedup-*.tgz $(DIST)/checksums.txt
	@set -e; for platform in $(PLATFORMS); do \
		os=$${platform%/*}; arch=$${platform#*/}; name=webhook-dedup_$(VERSION)_$${os}_$${arch}; \
		echo "build $$name"; \
		mkdir -p $(DIST)/$$name; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/$$name/webhook-dedup .; \
		cp LICENSE README.md $(DIST)/$$name/; \
		tar -C $(DIST) --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(MTIME) -cf - $$name | gzip -n > $(DIST)/$$name.tar.gz; \
		rm -r $(DIST)/$$name; \
	done
	$(HELM) package charts/webhook-dedup --version $(VERSION) --app-version $(VERSION) --destination $(DIST)
	cd $(DIST) && sha256sum *.tar.gz *.tgz > checksums.txt
	@cat $(DIST)/checksums.txt

# Pushes the images, webhook-dedup's and the example app's (examples/echo),
# for linux/amd64 and linux/arm64 with an SBOM and provenance attestations,
# tagged VERSION, and the chart `make release` packaged as an OCI artifact
# at VERSION. Needs docker buildx and logins to REGISTRY (the workflow's).
REGISTRY        ?= ghcr.io/webhook-dedup
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

publish:
	docker buildx build --platform $(IMAGE_PLATFORMS) --sbom=true --provenance=mode=max \
		--build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) \
		-t $(REGISTRY)/webhook-dedup:$(VERSION) --push .
	docker buildx build --platform $(IMAGE_PLATFORMS) --sbom=true --provenance=mode=max \
		-f examples/echo/Dockerfile -t $(REGISTRY)/webhook-dedup-echo:$(VERSION) --push .
	$(HELM) push $(DIST)/webhook-dedup-$(VERSION).tgz oci://$(REGISTRY)/charts

# The modules: the product, and test/sdk, which checks it against the
# providers' own libraries (stripe-go, …) and keeps them out of the
# product's go.mod.
MODULES := . test/sdk

# The test command the README gives: every package of every module, race
# detector on. go test runs -p (GOMAXPROCS) packages at a time, starting
# them in the order named: the slowest (test/, the end-to-end package,
# about half the suite's time alone) go first, so that they run beside the
# many short ones rather than after them. docs/testing.md says how long
# each takes.
SLOW_PACKAGES := ./test/ ./k8s/ ./dedup/redisstore/ ./dedup/pgstore/ .

test: deps
	@for mod in $(MODULES); do \
		slow=""; [ "$$mod" = . ] && slow="$(SLOW_PACKAGES)"; \
		echo "go test -race $$slow ./... (in $$mod)"; \
		(cd $$mod && $(GO) test -race -count=1 $$slow ./...) || exit 1; \
	done

# The fault matrix (test/store_faults_test.go) run long, by hand: five times
# the events of each cell and a fault four times as long (FAULT_SOAK=1).
# `make test` runs the same matrix short.
soak: deps
	FAULT_SOAK=1 $(GO) test -race -count=1 -timeout 60m -run '^TestFaultMatrix$$' ./test/

# What the tests run for real: redis-server, PostgreSQL and Chromium
# (Debian; the tests run initdb and postgres themselves, as an
# unprivileged user when root, and drive the console in headless
# Chromium), dynalite (npm: a DynamoDB on LevelDB; version 4 needs Node.js 20
# or later: Debian's nodejs and npm are installed when npm is missing, and
# a Node.js older than 20 stops here saying so), kustomize, helm and
# actionlint (Go). On a fresh machine helm's build dominates: a few minutes
# on two cores.
deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-cli >/dev/null || missing="$$missing redis-tools"; \
	{ command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v dynalite >/dev/null || command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@command -v kustomize >/dev/null || \
	  test -x "$$($(GO) env GOPATH)/bin/kustomize" || \
	  { echo "installing: kustomize $(KUSTOMIZE_VERSION)"; GOTOOLCHAIN=local $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION); }
	@command -v helm >/dev/null || \
	  test -x "$$($(GO) env GOPATH)/bin/helm" || \
	  { echo "installing: helm $(HELM_VERSION) (a few minutes)"; $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION); }
	@command -v actionlint >/dev/null || \
	  test -x "$$($(GO) env GOPATH)/bin/actionlint" || \
	  { echo "installing: actionlint $(ACTIONLINT_VERSION)"; $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION); }
	@command -v dynalite >/dev/null || { \
	  node -e 'process.exit(parseInt(process.versions.node) < 20 ? 1 : 0)' 2>/dev/null || { echo "dynalite $(DYNALITE_VERSION) needs Node.js 20 or later: install it (nodejs.org, or NodeSource's Debian packages)"; exit 1; }; \
	  echo "installing: dynalite $(DYNALITE_VERSION) (npm, global)"; \
	  $(SUDO) npm install --global --no-fund --no-audit --loglevel=error dynalite@$(DYNALITE_VERSION) >/dev/null; }

# vet and staticcheck compile every dependency to read its types; they do it
# as a release is built (CGO_ENABLED=0, -trimpath), so that on a cold build
# cache what they compile serves the builds the tests make without the race
# detector (the release and the Dockerfile's in k8s/, test/'s plain binaries,
# test/sdk's), where plain flags compiled it all once more (docs/testing.md).
lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	@for mod in $(MODULES); do \
		(cd $$mod && export CGO_ENABLED=0 GOFLAGS="$$GOFLAGS -trimpath" && \
			$(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...) || exit 1; \
	done

# Each fuzz target for FUZZTIME (go test -fuzz takes one target at a time),
# in the packages that have any, run from the package's folder so that
# test/sdk's, in a module of their own, are found. The default is a count of inputs, a few
# seconds per target here: with a duration, Go 1.26's fuzzing coordinator
# can report "context deadline exceeded" as a failure when its deadline
# lands while a worker is busy on a loaded machine (go.dev/issue/75804,
# fixed in Go 1.27), without any failing input. The targets are read from
# the source, not from `go test -list`, which would compile every package's
# dependencies once more with flags no other step uses (75 s on a cold
# cache here).
fuzz:
	@for dir in $$(grep -l '^func Fuzz' $$(git ls-files '*_test.go') | xargs -n1 dirname | sort -u); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$dir/*_test.go); do \
			echo "fuzz ./$$dir $$target"; \
			(cd $$dir && $(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) .) || exit 1; \
		done; \
	done

ci: lint test fuzz

# The load benchmark (a tool that prints a table, not a test): installs wrk,
# nginx, redis-server and postgresql when missing; about 20 minutes (ARGS=-repeats=5: about 30). `make bench ARGS=-quick`.
bench:
	sh test/bench/run.sh $(ARGS)
