#!/usr/bin/env bash
# Builds versitygw, a real S3-compatible server (Apache 2.0; S3 API over a
# POSIX directory), from the Go module proxy, for the object-store tests of
# pkg/records and the step runner. The binary lands in
# $OPR8R_CACHE/versitygw/<version>/versitygw (default ~/.cache/opr8r, outside
# the clone); the script prints its path.
#
# Why versitygw and not MinIO's server: MinIO publishes no semver tags the
# module proxy lists (go list -m -versions github.com/minio/minio is empty),
# it is AGPL, and it is several times larger to build.
set -euo pipefail
VERSITYGW_VERSION="${VERSITYGW_VERSION:-1.8.0}"
CACHE="${OPR8R_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opr8r}"
OUT="${CACHE}/versitygw/${VERSITYGW_VERSION}"
if [ -x "${OUT}/versitygw" ]; then echo "${OUT}/versitygw"; exit 0; fi
mkdir -p "${OUT}"
echo "versitygw: building v${VERSITYGW_VERSION} from the module proxy (a few minutes cold)..." >&2
start=$(date +%s)
( while sleep 15; do printf '.' >&2; done ) & ticker=$!
trap 'kill "${ticker}" 2>/dev/null || true' EXIT
GOBIN="${OUT}/bin.tmp" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags "-s -w" "github.com/versity/versitygw/cmd/versitygw@v${VERSITYGW_VERSION}" >&2
mv "${OUT}/bin.tmp/versitygw" "${OUT}/versitygw"
rmdir "${OUT}/bin.tmp"
echo >&2
echo "versitygw: built in $(( $(date +%s) - start ))s" >&2
echo "${OUT}/versitygw"
