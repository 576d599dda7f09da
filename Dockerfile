# syntax=docker/dockerfile:1
# The meshnet image: /meshnetd, /meshnet-controller and /meshnet-cni, static
# binaries on scratch. meshnetd runs nothing but itself (netlink and tc from
# Go, no shell, no iproute2) and installs /meshnet-cni into the node's
# /opt/cni/bin, so the image needs nothing else.
#
#   docker build -t meshnet:dev .

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
# Static: no cgo, so nothing links against the node's or the image's libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags='-s -w' -o /out/ \
      ./cmd/meshnetd ./cmd/meshnet-controller ./cmd/meshnet-cni

FROM scratch
COPY --from=build /out/meshnetd /out/meshnet-controller /out/meshnet-cni /
# The controller runs as this user; meshnetd's DaemonSet sets runAsUser 0.
USER 65532:65532
# No entrypoint: each manifest names its binary (command: [/meshnetd]).
