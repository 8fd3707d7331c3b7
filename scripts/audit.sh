#!/usr/bin/env bash
# Security audit of `make test` (docs/security.md): bandit over the project's code and pip-audit over the pinned
# dependencies (constraints.txt). Fails on any bandit finding of medium severity or more that is not in
# scripts/bandit-baseline.json (each entry there is explained in docs/security.md), and on any known
# vulnerability of a pinned dependency that scripts/advisories/ignore.toml does not list (each entry explained
# in docs/security.md too).
#
# pip-audit asks PyPI's per-version JSON API for each pin's advisories. Where that API cannot be reached (a
# registry mirror that serves only the simple index), pip-audit skips every dependency: this script then audits
# the pins against the dated snapshot of the PyPA Advisory Database in scripts/advisories/ (scripts/advisories.py
# check), says so, and warns when that snapshot is more than 90 days old. With AUDIT_STRICT=1, an audit that
# could look nothing up (neither pip-audit nor the snapshot) fails, and so does a pin missing from the snapshot.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PACKAGES=(core access registry predictions monitors training alerts service migrations)
STRICT=${AUDIT_STRICT:-0}

echo "audit: bandit (medium severity and up, new findings against scripts/bandit-baseline.json)"
"$BIN/bandit" -q -r "${PACKAGES[@]}" --severity-level medium -b scripts/bandit-baseline.json

echo "audit: pip-audit (constraints.txt)"
ignore_args=()
for id in $("$BIN/python" scripts/advisories.py ignored-ids); do
  ignore_args+=(--ignore-vuln "$id")
done
report=$(mktemp)
errors=$(mktemp)
trap 'rm -f "$report" "$errors"' EXIT
status=0
"$BIN/pip-audit" ${PIP_AUDIT_ARGS:-} "${ignore_args[@]}" -r constraints.txt --no-deps --disable-pip \
  --progress-spinner off -f json -o "$report" >/dev/null 2>"$errors" || status=$?
# pip-audit's own notes: not its hashing advice, nor "No known vulnerabilities found" (also said when it skipped all)
grep -v -e "users are encouraged to fully hash" -e "pip-compile" -e "No known vulnerabilities found" "$errors" >&2 || true
# exit 0: audited, nothing found; 1: a finding (or pip-audit failed); 3: nothing could be audited
verdict=0
"$BIN/python" - "$report" "$status" <<'PY' || verdict=$?
import json
import sys

status = int(sys.argv[2])
try:
    doc = json.load(open(sys.argv[1]))
except ValueError:  # pip-audit ended before writing its report (no network at all)
    print(f"  pip-audit wrote no report (exit {status}): nothing was audited")
    sys.exit(3)
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
    print(f"  the vulnerability service was not reachable: {skipped[0]['skip_reason']}")
    sys.exit(3)
if skipped:
    names = ", ".join(f"{d['name']} {d['version']}" for d in skipped)
    print(f"  WARNING: {len(skipped)} pins not audited: {names}", file=sys.stderr)
PY
case $verdict in
  0) exit 0 ;;
  3) ;;
  *) exit "$verdict" ;;
esac

echo "audit: pip-audit could audit nothing: auditing constraints.txt against the PyPA advisory database snapshot" \
  "(scripts/advisories/pypa-advisories.json) and PyPI's live advisories of each project's latest release instead"
check=0
if [ "$STRICT" = 1 ]; then
  "$BIN/python" scripts/advisories.py check --strict || check=$?
else
  "$BIN/python" scripts/advisories.py check || check=$?
fi
live=0
"$BIN/python" scripts/advisories.py latest || live=$?
if [ "$check" = 1 ] || [ "$live" = 1 ]; then
  exit 1
fi
if [ "$check" = 2 ] && [ "$live" = 3 ]; then
  echo "  WARNING: neither pip-audit, nor the advisory snapshot, nor PyPI's live advisories could audit the pins" >&2
  [ "$STRICT" = 1 ] && exit 1
  exit 0
fi
[ "$STRICT" = 1 ] && [ "$check" != 0 ] && exit "$check"
exit 0
