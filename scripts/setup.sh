#!/usr/bin/env bash
# Fresh machine to a running hal: installs what is missing, builds, and runs
# the main job: halinfo, then halconform with the smoke profile (HTML report
# in halconform-report/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
"$root/build/bin/halinfo"
# Qualify this machine with the default (smoke) conformance profile.
"$root/build/bin/halconform" --report-dir "$root/halconform-report" || status=$?
echo "setup: conformance report: $root/halconform-report/conformance.html"
exit "${status:-0}"
