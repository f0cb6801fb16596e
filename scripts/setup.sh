#!/usr/bin/env bash
# Fresh machine to a running hal: installs what is missing, builds, and runs
# the main job (halinfo on this machine).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
"$root/build/bin/halinfo"
