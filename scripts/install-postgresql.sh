#!/usr/bin/env bash
# Debian's PostgreSQL server for the tests that run the service against PostgreSQL (the tests
# start their own throw-away cluster on a free local port; nothing is configured system-wide).
set -euo pipefail
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
