#!/usr/bin/env bash
# gen-proto.sh regenerates meshnet's API from api/proto: Go messages, gRPC
# stubs, grpc-gateway REST handlers (api/proto/meshnet/v1) and one merged
# OpenAPI v2 document (api/openapi/meshnet.swagger.json), after buf lint.
# Idempotent: a second run leaves every generated file byte-identical.
#
# buf is pinned in tools/buf/go.mod, the protoc plugins in
# tools/protoc-gen/go.mod (apart from buf, whose newer protobuf would
# otherwise pull protoc-gen-go past the main module's runtime). Binaries and
# google/api protos live in the git-ignored .cache/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="$root/.cache"
bin="$cache/bin"
googleapis_version=v1.16.0

mkdir -p "$bin"
(cd "$root/tools/buf" && go build -o "$bin/" tool)
(cd "$root/tools/protoc-gen" && go build -o "$bin/" tool)

# google/api/{annotations,http}.proto from the grpc-gateway v1 module, which
# ships them under third_party/googleapis.
# Downloaded outside any module so that no go.sum records it.
gw_dir=$(cd "${TMPDIR:-/tmp}" &&
  GO111MODULE=on go mod download -json "github.com/grpc-ecosystem/grpc-gateway@$googleapis_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z "$gw_dir" ]]; then
  echo "gen-proto: cannot download github.com/grpc-ecosystem/grpc-gateway@$googleapis_version" >&2
  exit 1
fi
mkdir -p "$cache/googleapis/google/api"
for f in annotations.proto http.proto; do
  install -m 0644 "$gw_dir/third_party/googleapis/google/api/$f" "$cache/googleapis/google/api/$f"
done

cd "$root"
export PATH="$bin:$PATH"
buf lint
rm -f api/proto/meshnet/v1/*.pb.go api/proto/meshnet/v1/*.pb.gw.go api/openapi/meshnet.swagger.json
buf generate
