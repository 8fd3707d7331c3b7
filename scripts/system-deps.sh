#!/usr/bin/env bash
# Debian packages the test suite needs beyond Python: headless Chromium (renders the HTML drift report) and
# Prometheus' `promtool` (checks the /metrics exposition, package `prometheus`, which also brings the
# `prometheus` server the deploy/ tests start), Alertmanager's `amtool` (checks deploy/alertmanager) and Java 17
# (the Spark standalone cluster the lake tests start: `pyspark` brings Spark's jars, not a JVM).
# Idempotent: installs only what is missing. Needs root (or sudo) on Debian/Ubuntu.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
java -version 2>&1 | grep -qE 'version "(17|21)' || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing Debian packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
