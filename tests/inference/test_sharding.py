"""Sharding over several devices (``devices=``): on this CPU machine, four devices from
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` in a child process (the flag must
be set before JAX starts).  Sharded runs equal single-device runs with the same key."""

from __future__ import annotations


import jax
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import sharding

from ._devices import TOL, check_equal, run_four_devices


def _four_devices(*args) -> dict:
    return run_four_devices(*args, timeout=600)


@pytest.fixture(scope="module")
def four_device_run():
    return _four_devices()


def _check_equal(out: dict) -> dict:
    """The differences of a four-device run (all within TOL), the factors' shapes among the
    flags checked; returns them."""
    assert any("/shape/M" in k for k, v in out.items() if isinstance(v, bool)), out
    return check_equal(out, TOL)


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
