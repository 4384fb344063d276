#!/usr/bin/env bash
# Debian's Slurm (slurmctld, slurmd, the client commands) and munge for the tests of the Slurm executor
# (tests/test_slurm.py: they start their own single-node cluster in a temporary folder, with its own munge
# key, ports and state; nothing is configured or started system-wide).
set -euo pipefail
command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd \
  slurm-client munge >/dev/null
