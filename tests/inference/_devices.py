"""Four CPU devices in a child process (the sharding tests): its environment, the one
multi-device script (``scripts/four_devices.py``, whose first argument names the case) and
the check that its sharded runs equal the one-device runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).parent / "scripts" / "four_devices.py"

# Sharded and one-device runs differ only by the summation order of psums and all-gathered
# products: float64 rounding (eps ~ 2.2e-16) carried through the chain.  Plain Gibbs
# forgets its state and stays near 1e-13 after 40 sweeps, the over-relaxed updates
# (rho = -0.7) carry it forward and reach ~2e-9; sqrt(eps) ~ 1.5e-8 bounds that with room,
# while any wrong row, key or padding gives differences of order one.
TOL = float(np.sqrt(np.finfo(np.float64).eps))


def four_cpu_devices_env() -> dict:
    """``os.environ`` with four host CPU devices and the CPU platform.

    The device count is appended to ``XLA_FLAGS``, so the suite's other XLA flags (set in
    ``tests/conftest.py``) carry over; XLA reads them when the child's backend starts."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
    return {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}


def run_four_devices(*args: str, timeout: float = 900) -> dict:
    """The JSON that ``scripts/four_devices.py *args`` prints, run with four CPU devices."""
    res = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=four_cpu_devices_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def check_equal(out: dict, tol: float = TOL) -> dict:
    """The differences (floats) of a four-device run, all within ``tol``, after its flags
    (a Gibbs run's same draw names and shapes: no padding rows returned) are all true;
    returns them."""
    assert out["devices"] == 4
    flags = {k: v for k, v in out.items() if isinstance(v, bool)}
    assert all(flags.values()), {k: v for k, v in flags.items() if not v}
    diffs = {k: v for k, v in out.items() if isinstance(v, float)}
    bad = {k: v for k, v in diffs.items() if not v <= tol}
    assert diffs and not bad, bad
    return diffs
