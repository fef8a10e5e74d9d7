#!/usr/bin/env bash
# Download (here, with network) the wheels the device image lacks into the git-ignored
# .device-wheels/, for Python 3.12, no dependencies (the image has numpy, scipy, ...):
# arviz (the version of the development venv) and what it may need beyond the image;
# gpu_check.sh installs only those whose module the image cannot import.  Carry the folder to the device machine
# (run(carry=[".device-wheels"])); benchmarks/gpu_check.sh installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
mkdir -p .device-wheels
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any \
  -d .device-wheels arviz==0.23.4 h5netcdf==1.8.2 xarray-einstats==0.9.1 xarray h5py pandas platformdirs "$@"
ls -l .device-wheels
