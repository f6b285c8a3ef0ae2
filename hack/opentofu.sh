#!/usr/bin/env bash
# Builds OpenTofu from the Go module proxy through a throwaway wrapper module
# that copies the replace (and godebug) directives of OpenTofu's own go.mod.
# The binary lands in $OPR8R_CACHE/tofu/<version>/tofu (default
# ~/.cache/opr8r, outside the clone); the script prints its path.
set -euo pipefail
TOFU_VERSION="${TOFU_VERSION:-1.12.6}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
OUT="${CACHE}/tofu/${TOFU_VERSION}"
if [ -x "${OUT}/tofu" ]; then echo "${OUT}/tofu"; exit 0; fi
mkdir -p "${OUT}"
gomod="$(go mod download -json "github.com/opentofu/opentofu@v${TOFU_VERSION}" | jq -r .GoMod)"
work="$(mktemp -d)"; trap 'rm -rf "${work}"' EXIT
{
  echo "module opr8r.local/tofubuild"
  echo
  awk '$1=="go"{print; exit}' "${gomod}"
  echo
  # godebug block, if any
  awk '/^godebug \(/{p=1} p{print} p&&/^\)/{exit}' "${gomod}"
  echo
  echo "require github.com/opentofu/opentofu v${TOFU_VERSION}"
  echo
  grep -E '^replace ' "${gomod}" || true
  awk '/^replace \(/{p=1} p{print} p&&/^\)/{p=0}' "${gomod}"
} >"${work}/go.mod"
echo "opentofu: building tofu v${TOFU_VERSION} from the module proxy (a few minutes cold)..." >&2
(
  cd "${work}"
  GOFLAGS=-mod=mod go get "github.com/opentofu/opentofu/cmd/tofu@v${TOFU_VERSION}" >&2
  ( while sleep 15; do printf '.' >&2; done ) & ticker=$!
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "${OUT}/tofu.tmp" github.com/opentofu/opentofu/cmd/tofu
  rc=$?; kill "${ticker}" 2>/dev/null || true; echo >&2; exit "${rc}"
)
mv "${OUT}/tofu.tmp" "${OUT}/tofu"
"${OUT}/tofu" version >&2
echo "${OUT}/tofu"
