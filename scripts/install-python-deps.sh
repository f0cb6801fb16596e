#!/usr/bin/env bash
# Creates (or reuses) the Python test environment .venv-python/ at the
# repository root: the build tools of the hal wheel (nanobind,
# scikit-build-core), numpy, pytest, torch, transformers and DeepSpeed. Does
# nothing when the environment is complete. PyPI has only the CUDA build of torch (no "+cpu"
# wheel; those live on download.pytorch.org), so the first run downloads
# torch with its nvidia-* packages (~5 GB installed, a few minutes); later
# runs reuse the venv. HAL_PYTHON_NO_TORCH=1 leaves torch out (its tests then skip).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HAL_PYTHON_VENV:-$root/.venv-python}"
python="${PYTHON:-python3}"

# Pinned so CI is reproducible; bump together with docs/python.md.
build_requirements=(nanobind==3.1.0 scikit-build-core==1.1.2)
test_requirements=(numpy==2.4.* pytest==9.2.*)
# Installed after torch (they need it): the hal.transformers tests (tiny configs, no downloads; accelerate
# for transformers' Trainer).
torch_test_requirements=(transformers==5.25.* accelerate==1.16.*)
# DeepSpeed, for the test of the memory plan under a DeepSpeed Trainer. PyPI has only its sdist, whose setup.py
# imports torch: it builds against the venv's torch (no build isolation), with no C++ op ahead of time
# (DS_BUILD_OPS=0; on the CPU its first Trainer compiles one small op, deepspeed_shm_comm, with ninja, once).
deepspeed_requirement=deepspeed==0.19.*
torch_requirement=torch==2.15.0

if [ ! -x "$venv/bin/python" ]; then
  echo "install-python-deps: creating $venv"
  if ! "$python" -m venv "$venv"; then
    echo "install-python-deps: '$python -m venv' failed; on Debian install python3-venv (and python3-dev, whose" \
         "headers the extension's build needs), or set PYTHON to another interpreter" >&2
    exit 1
  fi
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# Installs the requirements given whose package the venv lacks; arguments starting with -- are pip options.
install_missing() {
  local options=() missing=() requirement
  for requirement in "$@"; do
    if [[ $requirement == --* ]]; then
      options+=("$requirement")
    elif ! "$venv/bin/python" -m pip show "${requirement%%=*}" >/dev/null 2>&1; then
      missing+=("$requirement")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-python-deps: installing ${missing[*]}"
    "${pip[@]}" install "${options[@]}" "${missing[@]}"
  fi
}

install_missing "${build_requirements[@]}" "${test_requirements[@]}"

if [ "${HAL_PYTHON_NO_TORCH:-0}" != 1 ] && ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "install-python-deps: installing $torch_requirement (PyPI's CUDA build, several GB; once per venv)"
  start=$(date +%s)
  "${pip[@]}" install "$torch_requirement"
  echo "install-python-deps: torch installed in $(( $(date +%s) - start )) s"
fi
if [ "${HAL_PYTHON_NO_TORCH:-0}" != 1 ]; then
  install_missing "${torch_test_requirements[@]}"
  DS_BUILD_OPS=0 install_missing --no-build-isolation "$deepspeed_requirement"
fi
echo "install-python-deps: $venv ready ($("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])'))"
