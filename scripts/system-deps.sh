#!/usr/bin/env bash
# Debian packages the test suite needs beyond Python: headless Chromium (renders the HTML drift report) and
# Prometheus' `promtool` (checks the /metrics exposition, package `prometheus`, which also brings the
# `prometheus` server the deploy/ tests start) and Alertmanager's `amtool` (checks deploy/alertmanager).
# Idempotent: installs only what is missing. Needs root (or sudo) on Debian/Ubuntu.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
