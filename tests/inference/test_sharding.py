"""Sharding over several devices (``devices=``): on this CPU machine, four devices from
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` in a child process (the flag must
be set before JAX starts).  Sharded runs equal single-device runs with the same key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import sharding

from ._devices import four_cpu_devices_env

SCRIPT = Path(__file__).parent / "scripts" / "four_devices.py"

# Differences come only from the summation order of psum (S_h) and of the all-gathered
# products, i.e. float64 rounding (eps ~ 2.2e-16) propagated through the chain: plain
# Gibbs forgets its state and stays near 1e-13 after 40 sweeps, the over-relaxed updates
# (rho = -0.7) carry it forward and reach ~2e-9.  sqrt(eps) ~ 1.5e-8 bounds that with room,
# while any wrong row, key or padding gives differences of order one.
TOL = np.sqrt(np.finfo(np.float64).eps)


def _four_devices(*args) -> dict:
    env = four_cpu_devices_env()
    res = subprocess.run(
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def four_device_run():
    return _four_devices()


def _check_equal(out: dict) -> dict:
    """The differences of a four-device run (all within TOL), shapes checked; returns them."""
    assert out["devices"] == 4
    flags = {k: v for k, v in out.items() if isinstance(v, bool)}
    assert any("/shape/M" in k for k in flags), flags
    assert all(flags.values()), flags  # same draws and shapes: padding rows are not returned
    diffs = {k: v for k, v in out.items() if isinstance(v, float)}
    bad = {k: v for k, v in diffs.items() if not v <= TOL}
    assert not bad, bad
    return diffs


def test_four_devices_equal_one_device(four_device_run):
    """The discrete prior with the column moves (reflected spike/slab flips: psum-ed
    marginals and Gram matrices, padded draws), sharded over four devices and resumed
    from a checkpoint on three, and VB, equal one device."""
    diffs = _check_equal(four_device_run)
    assert any(k.startswith("vb_ig/") for k in diffs) and any(
        k.startswith("discrete/three_checkpointed/") for k in diffs
    )


@pytest.mark.slow  # a child process compiling six more fits (~1 min); one prior in the default suite
def test_four_devices_other_priors():
    """The gamma prior's over-relaxed rows (they read the current factors) and the
    inverse-gamma prior's column moves with biases, sharded, equal one device."""
    diffs = _check_equal(_four_devices("more"))
    assert {k.split("/")[0] for k in diffs} == {"gamma", "ig_moves_biases"}


@pytest.mark.slow
def test_four_devices_fused_moves():
    """The column moves inside the sweep (``fuse_column_moves``: psum-ed marginals, the
    padded move draws split by rows, the sums transformed on each device), sharded, equal
    one device: the discrete prior's reflected flips, the inverse-gamma prior's walk every
    other sweep with biases and learned noise."""
    diffs = _check_equal(_four_devices("fused"))
    assert {k.split("/")[0] for k in diffs} == {"discrete_fused", "ig_fused_biases"}


@pytest.mark.slow
def test_four_devices_annealed_switch():
    """The annealed switch sharded (and resumed from a checkpoint on three devices) equals
    one device, with biases and learned noise; its switches were accepted in every chain
    (else the sharded path's end state would not be compared)."""
    out = _four_devices("anneal")
    accepted = out.pop("discrete_anneal/accepted")
    assert accepted > 0, out
    diffs = _check_equal(out)
    assert {k for k in diffs if k.endswith("/switches")} == {
        "discrete_anneal/four/switches",
        "discrete_anneal/three_checkpointed/switches",
    }


def test_bad_devices_argument():
    sim = bmc.datasets.simulate_paper(20, seed=0)
    with pytest.raises(ValueError, match="devices must not be empty"):
        bmc.fit(sim.train, K=2, devices=[], progress_bar=False)
    with pytest.raises(ValueError, match="must be jax devices"):
        bmc.fit(sim.train, K=2, devices=["gpu0"], progress_bar=False)
    with pytest.raises(ValueError, match="more than once"):
        bmc.fit(sim.train, K=2, devices=[jax.devices()[0]] * 2, progress_bar=False)
    with pytest.raises(ValueError, match="devices= applies to method='gibbs' or 'vb'"):
        bmc.fit(sim.train, K=2, method="svi", devices=jax.devices(), progress_bar=False)


def test_one_device_mesh_is_the_plain_run():
    """devices=[the default device] goes through shard_map with one block: same draws."""
    sim = bmc.datasets.simulate_paper(21, seed=0)
    kw = dict(K=2, num_warmup=5, num_samples=10, thinning=1, progress_bar=False, seed=1)
    a = bmc.fit(sim.train, **kw)
    b = bmc.fit(sim.train, devices=jax.devices()[:1], **kw)
    tol = (
        1e3 * np.finfo(np.float32).eps
    )  # one device through shard_map: only the rounding of S differs
    np.testing.assert_allclose(b.samples["gamma"], a.samples["gamma"], rtol=tol, atol=tol)
    assert sharding.padded_size(21, 4) == 24
