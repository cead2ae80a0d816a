# syntax=docker/dockerfile:1
# webhook-dedup's image: a static binary on distroless, running as non-root.
#   docker build --build-arg COMMIT=$(git rev-parse --short HEAD) -t webhook-dedup .
# The version is the VERSION file's (the binary embeds it); --build-arg
# VERSION=… overrides it.
# k8s/dockerfile_test.go runs this file's go build and checks what it makes.

# The builder runs on the build machine's platform and cross-compiles, so
# multi-platform builds (--platform linux/amd64,linux/arm64) need no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# No separate `go mod download` layer: go.mod also lists test-only modules
# (k8s.io/api for the manifest tests), and go build fetches only what the
# binary imports. The cache mounts keep modules and compiled packages from
# one build to the next.
COPY . .
# Set by BuildKit from --platform.
ARG TARGETOS
ARG TARGETARCH
# Empty: the VERSION file's version, and commit "unknown" (the context
# holds no .git to read it from).
ARG VERSION=
ARG COMMIT=
# Static (no cgo), no local paths in the binary, version and commit
# stamped for `webhook-dedup version`.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/webhook-dedup .

# No shell, no package manager, no libc: only CA certificates (for rediss://),
# time zone data and the binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/webhook-dedup /webhook-dedup
# Numeric, so the kubelet can verify runAsNonRoot (65532 is distroless's nonroot).
USER 65532:65532
# Webhooks (LISTEN_ADDR) and /healthz, /readyz, /metrics (ADMIN_ADDR).
EXPOSE 8080 9090
# The binary checks its own /readyz: no curl needed in the image.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/webhook-dedup", "healthcheck"]
ENTRYPOINT ["/webhook-dedup"]
