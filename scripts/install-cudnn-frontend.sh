#!/usr/bin/env bash
# The cuDNN frontend's headers (header-only C++ over cuDNN's graph API) for the
# CUDA backend's fused attention: unpacked from the pinned PyPI wheel into
# .deps/cudnn-frontend-VERSION/include, where CMake looks first. The headers
# are the same in every wheel, so one wheel is pinned by platform and Python
# tag: the download does not depend on the local Python. Does nothing when
# they are present.
set -euo pipefail

version=1.32.0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$root/.deps/cudnn-frontend-$version"
if [ -f "$target/include/cudnn_frontend.h" ]; then
  echo "install-deps: cuDNN frontend $version headers present in $target"
  exit 0
fi

download="$(mktemp -d)"
trap 'rm -rf "$download"' EXIT
echo "install-deps: downloading nvidia-cudnn-frontend $version (headers only are kept)"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
  --dest "$download" "nvidia-cudnn-frontend==$version"
python3 - "$download" "$target" <<'PYTHON'
import pathlib, shutil, sys, zipfile
download, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheels = list(download.glob("nvidia_cudnn_frontend-*.whl"))
if len(wheels) != 1:
    sys.exit(f"install-deps: expected one cuDNN frontend wheel in {download}, found {wheels}")
staging = target.with_name(target.name + ".partial")
shutil.rmtree(staging, ignore_errors=True)
with zipfile.ZipFile(wheels[0]) as wheel:
    members = [name for name in wheel.namelist() if name.startswith("include/")]
    if "include/cudnn_frontend.h" not in members:
        sys.exit(f"install-deps: {wheels[0].name} has no include/cudnn_frontend.h")
    wheel.extractall(staging, members)
shutil.rmtree(target, ignore_errors=True)
staging.rename(target)
print(f"install-deps: cuDNN frontend headers in {target}/include")
PYTHON
