#!/usr/bin/env bash
# One prepared device check, meant to finish inside 8 minutes:
#
#   benchmarks/gpu_check.sh              sweep times of both hot paths (BCSR, segment sums)
#                                        per size / K / chains, build times, device memory,
#                                        an ML-100K fit's test RMSE (benchmarks/gpu_check.py)
#   benchmarks/gpu_check.sh --smoke      the same on tiny sizes (any backend; seconds)
#   benchmarks/gpu_check.sh --tests      the default test suite (pytest-xdist when present),
#                                        then the failures; extra arguments go to pytest
#
# The device image has jax with CUDA, numpyro, scipy, matplotlib but not arviz, h5netcdf,
# xarray-einstats: their wheels are carried in the git-ignored .device-wheels/ (fill it
# here with benchmarks/fetch_device_wheels.sh, and carry it: run(carry=[".device-wheels"]))
# and installed with pip --no-deps --target into a temporary folder on PYTHONPATH.
# PYTHON (default python3) picks the interpreter; GPU_CHECK_TEST_TIMEOUT (default 540)
# bounds the test run in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
EXTRA="${TMPDIR:-/tmp}/bmczoo-device-extra"
if ! "$PY" -c "import arviz, h5netcdf, xarray_einstats" 2>/dev/null; then
  if compgen -G ".device-wheels/*.whl" >/dev/null; then
    WANT=()
    for w in .device-wheels/*.whl; do  # only what the image cannot import
      mod=$(basename "$w" | cut -d- -f1 | tr 'A-Z' 'a-z')
      "$PY" -c "import $mod" 2>/dev/null || WANT+=("$w")
    done
    echo "gpu_check: installing ${WANT[*]}"
    "$PY" -m pip install -q --no-deps --disable-pip-version-check --target "$EXTRA" "${WANT[@]}" \
      || echo "gpu_check: installing .device-wheels failed" >&2
  else
    echo "gpu_check: arviz/h5netcdf/xarray-einstats missing and no .device-wheels/ (benchmarks/fetch_device_wheels.sh)" >&2
  fi
fi
export PYTHONPATH="src${EXTRA:+:$EXTRA}${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import jax; print('gpu_check:', jax.__version__, jax.default_backend(), jax.devices())"

if [[ "${1:-}" == "--tests" ]]; then
  shift
  XDIST=()
  if "$PY" -c "import xdist" 2>/dev/null; then
    # several processes share one GPU: no preallocation of 75% of its memory each
    export XLA_PYTHON_CLIENT_PREALLOCATE=false
    XDIST=(-n "${GPU_CHECK_WORKERS:-8}")
  fi
  start=$(date +%s)
  [[ $# -eq 0 ]] && set -- tests  # the default suite (pyproject: -m 'not slow')
  timeout -s INT "${GPU_CHECK_TEST_TIMEOUT:-540}" "$PY" -m pytest -q -p no:cacheprovider "${XDIST[@]}" \
    -rfE --durations=15 "$@"
  rc=$?
  echo "gpu_check --tests: rc=$rc in $(( $(date +%s) - start ))s (124/130: cut at the timeout)"
  exit $rc
fi
exec "$PY" benchmarks/gpu_check.py "$@"
