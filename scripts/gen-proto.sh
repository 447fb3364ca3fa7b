#!/usr/bin/env bash
# Regenerates gen/ from proto/ with pinned tools:
#
#   scripts/gen-proto.sh
#
# protoc comes from Debian's protobuf-compiler (installed with apt-get when
# missing and run as root); the Go plugins are installed at their pinned
# versions into .bin/ (not committed). The output is deterministic: re-running
# on an unchanged proto/ leaves gen/ byte-identical. The generated code is
# committed, so building and testing thaw needs none of these tools.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_VERSION=3.21.12 # Debian bookworm's protobuf-compiler; printed in every .pb.go
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1

bin="$PWD/.bin"

if ! command -v protoc >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq protobuf-compiler >/dev/null
  else
    echo "gen-proto: protoc $PROTOC_VERSION is required (apt-get install protobuf-compiler)" >&2
    exit 1
  fi
fi
if [ "$(protoc --version)" != "libprotoc $PROTOC_VERSION" ]; then
  echo "gen-proto: need libprotoc $PROTOC_VERSION (its version is written into the output), have: $(protoc --version)" >&2
  exit 1
fi

# install_plugin NAME PACKAGE VERSION WANT: go install PACKAGE@VERSION into
# .bin unless .bin/NAME --version already prints WANT.
install_plugin() {
  if [ "$("$bin/$1" --version 2>/dev/null)" != "$4" ]; then
    GOBIN="$bin" go install "$2@$3"
  fi
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go \
  "$PROTOC_GEN_GO_VERSION" "protoc-gen-go $PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go \
  "$PROTOC_GEN_CONNECT_GO_VERSION" "${PROTOC_GEN_CONNECT_GO_VERSION#v}"

# Everything under gen/ is generated: clear the previous output so that files
# of deleted protos disappear.
find gen -type f \( -name '*.pb.go' -o -name '*.connect.go' \) -delete 2>/dev/null || true

mapfile -t protos < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
mkdir -p gen
protoc -I proto \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-connect-go="$bin/protoc-gen-connect-go" \
  --go_out=gen --go_opt=paths=source_relative \
  --connect-go_out=gen --connect-go_opt=paths=source_relative \
  "${protos[@]}"
find gen -type d -empty -delete
echo "gen-proto: generated $(find gen -type f -name '*.go' | wc -l) files from ${#protos[@]} protos"
