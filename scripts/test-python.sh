#!/usr/bin/env bash
# Builds the hal wheel (libhal, the plugins and the extension; build-python/),
# checks that a fresh venv with only that wheel imports it and sees the host
# device, then runs the Python tests (python/tests) with pytest in the cached
# test environment .venv-python/ (scripts/install-python-deps.sh). The torch
# tests skip only when torch is missing (HAL_PYTHON_NO_TORCH=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HAL_PYTHON_VENV:-$root/.venv-python}"
"$root/scripts/install-python-deps.sh"
py="$venv/bin/python"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== python: build the wheel (build-python/)"
start=$(date +%s)
# No build isolation: the venv has the pinned nanobind and scikit-build-core,
# and the build directory is reused between runs. The host backend only (the
# tests run on the CPU; the GPU plugins are built and tested by the main
# build), unless the caller says otherwise.
export HAL_WITH_CUDA="${HAL_WITH_CUDA:-OFF}" HAL_WITH_ROCM="${HAL_WITH_ROCM:-OFF}"
"$py" -m pip wheel --no-build-isolation --no-deps -q -w "$work/wheel" "$root/python"
wheel="$(ls "$work"/wheel/hal-*.whl)"
echo "python: $(basename "$wheel") built in $(( $(date +%s) - start )) s ($(du -h "$wheel" | cut -f1))"

echo "== python: a fresh venv with only the wheel"
"${PYTHON:-python3}" -m venv "$work/fresh"
"$work/fresh/bin/python" -m pip install -q --no-index --no-deps "$wheel"
(cd "$work" && "$work/fresh/bin/python" -c "import hal; print(hal.runtime().devices)") | tee "$work/devices.txt"
grep -q "<hal.Device host:0>" "$work/devices.txt"

echo "== python: pytest (python/tests)"
"$py" -m pip install -q --no-index --no-deps --force-reinstall "$wheel"
set +e
# From outside the source tree, so that "import hal" is the installed package.
(cd "$work" && "$py" -m pytest -p no:cacheprovider -q -rs "$root/python/tests" "$@") | tee "$work/pytest.txt"
status=${PIPESTATUS[0]}
set -e
summary="$(grep -E '(passed|failed|error|skipped|no tests ran)' "$work/pytest.txt" | tail -1)"
echo "python tests: ${summary:-no summary line}"
if [ "$status" -eq 5 ]; then
  echo "python tests: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$status"
