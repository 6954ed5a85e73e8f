#!/usr/bin/env bash
# Installs node/'s modules (npm ci) when node/package-lock.json changed
# since the last install, for .ci/generate-node and .ci/test-node. A stamp
# in node_modules holds the lock file's digest, so a second run installs
# nothing and needs no registry.
#
# Exit status: 0 when the modules are installed; 1 on failure (node or npm
# missing under CI=true, or a registry that answers but npm ci fails); 3
# when the caller should skip with the warning printed here (node or npm
# missing, or the npm registry silent, outside CI: CI may lack a registry,
# so a silent one is a warning there too).
set -euo pipefail
cd "$(dirname "$0")/.."
who=${1:-node}

warn() {
	echo "" >&2
	echo "!!! $who: SKIPPED: $* !!!" >&2
	echo "" >&2
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	if [ "${CI:-}" = "true" ]; then
		echo "$who: node or npm missing (make deps installs them)" >&2
		exit 1
	fi
	warn "node or npm missing (make deps installs them)"
	exit 3
fi

stamp=node_modules/.ratelimitd-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi
if ! timeout 20 npm ping >/dev/null 2>&1; then
	warn "the npm registry ($(npm config get registry)) did not answer within 20 s: node/'s modules are not installed"
	exit 3
fi
npm ci --no-audit --no-fund
echo "$want" >"$stamp"
