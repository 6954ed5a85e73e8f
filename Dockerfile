# syntax=docker/dockerfile:1
#
# The ratelimitd image: a static binary on distroless, run as a non-root
# user, at /usr/local/bin/ratelimitd and at /bin/ratelimit, where
# envoyproxy/ratelimit's image has its binary. It holds no rules and sets
# no RATELIMITD_* variable: give it --config (or RATELIMITD_CONFIG) or
# --xds-server, and RATELIMITD_GRPC_ADDR=:8081 RATELIMITD_HTTP_ADDR=:8080
# to listen beyond loopback; or RATELIMITD_COMPAT=envoyproxy and the
# reference's variables, whose listeners are on every interface. Build it
# from the repository's root:
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t ratelimitd .
#
# cmd/ratelimitd/packaging_test.go checks this file: no RATELIMITD_*
# variables, no rules, both paths of the binary, and the build command,
# which it runs.

FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src
# The modules first, so that a change to the code reuses this layer: go.mod
# replaces the generated stubs' and the Go client's modules by gen/ and
# client/, whose go.mod files the download reads.
COPY go.mod go.sum ./
COPY gen/go.mod gen/go.sum ./gen/
COPY client/go.mod client/go.sum ./client/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=devel
# Set by BuildKit to the platform being built (docker buildx build
# --platform linux/arm64): Go cross-compiles, no emulation needed.
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.mainVersion=$VERSION" -o /out/ratelimitd ./cmd/ratelimitd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratelimitd /usr/local/bin/ratelimitd
# Where the reference's Helm charts and Envoy Gateway run it.
COPY --from=build /out/ratelimitd /bin/ratelimit
# distroless's nonroot user, by number, so that Kubernetes's runAsNonRoot
# can verify it.
USER 65532:65532
EXPOSE 8081 8080
ENTRYPOINT ["/usr/local/bin/ratelimitd"]
