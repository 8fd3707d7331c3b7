#!/usr/bin/env bash
# Security audit of `make test` (docs/security.md): bandit over the project's code and pip-audit over the pinned
# dependencies (constraints.txt). Fails on any bandit finding of medium severity or more that is not in
# scripts/bandit-baseline.json (each entry there is explained in docs/security.md), and on any known
# vulnerability of a pinned dependency.
#
# pip-audit asks PyPI's JSON API for each pin's advisories. Where that API cannot be reached (a registry mirror
# that serves only the simple index), pip-audit skips every dependency: this script says so loudly and goes on,
# unless AUDIT_STRICT=1, which makes an audit that could not look anything up a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PACKAGES=(core access registry predictions monitors training alerts service migrations)

echo "audit: bandit (medium severity and up, new findings against scripts/bandit-baseline.json)"
"$BIN/bandit" -q -r "${PACKAGES[@]}" --severity-level medium -b scripts/bandit-baseline.json

echo "audit: pip-audit (constraints.txt)"
report=$(mktemp)
trap 'rm -f "$report"' EXIT
status=0
"$BIN/pip-audit" ${PIP_AUDIT_ARGS:-} -r constraints.txt --no-deps --disable-pip --progress-spinner off -f json -o "$report" >/dev/null \
  2> >(grep -v -e "users are encouraged to fully hash" -e "pip-compile" >&2) || status=$?
"$BIN/python" - "$report" "$status" <<'PY'
import json
import os
import sys

status = int(sys.argv[2])
try:
    doc = json.load(open(sys.argv[1]))
except ValueError:  # pip-audit ended before writing its report (no network at all)
    print(f"  WARNING: pip-audit wrote no report (exit {status}): nothing was audited", file=sys.stderr)
    sys.exit(1 if os.environ.get("AUDIT_STRICT") == "1" else 0)
deps = doc.get("dependencies", [])
vulnerable = [d for d in deps if d.get("vulns")]
skipped = [d for d in deps if d.get("skip_reason")]
for d in vulnerable:
    for v in d["vulns"]:
        print(f"  {d['name']} {d['version']}: {v['id']} (fixed in {', '.join(v.get('fix_versions', [])) or 'no release'})")
audited = len(deps) - len(skipped)
print(f"  {len(deps)} pinned dependencies: {audited} audited, {len(vulnerable)} with known vulnerabilities, {len(skipped)} skipped")
if vulnerable or (status and not skipped):
    sys.exit(1)
if skipped and audited == 0:
    print(
        "  WARNING: no dependency could be audited (the vulnerability service was not reachable: "
        f"{skipped[0]['skip_reason']})",
        file=sys.stderr,
    )
    sys.exit(1 if os.environ.get("AUDIT_STRICT") == "1" else 0)
PY
