#!/usr/bin/env bash
# Debian's chromium for the browser tests (Playwright drives it; its own browser download is not used).
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
