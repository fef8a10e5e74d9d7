"""Sharded Gibbs with feature links (``devices=`` with ``NormalWishart(row_features=...,
col_features=..., implicit=...)``): the link's arrays split by the rows of the linked
factor, each device's prior means and its part of ``V^T X^T M`` from its block, the link's
block replicated.  On this CPU machine four devices come from
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` in a child process; the sharded runs
equal the single-device run with the same key (float64)."""

from __future__ import annotations


import numpy as np
import pytest

from bmczoo.priors.macau.sharded import link_layout

from ._devices import check_equal, run_four_devices


def _four_devices(*args) -> dict:
    return run_four_devices("links", *args, timeout=600)


def test_four_devices_with_links_equal_one_device():
    """Side features and implicit feedback on both sides, learned noise and biases: the
    sharded run's draws (the links' ``B`` included) equal one device's."""
    out = _four_devices()
    keys = set(out["side+implicit/keys"])
    assert {"B_M", "B_N", "lam_B_M", "lam_B_N", "M", "N"} <= keys
    diffs = check_equal(out)
    assert {k.rsplit("/", 1)[1] for k in diffs} >= {"B_M", "B_N", "pred_mean", "rmse_draw"}


@pytest.mark.slow  # a child process compiling five fits (~1 min)
def test_four_devices_with_links_checkpointed_and_one_side():
    """The same run resumed from checkpoints on three devices, and a link on the columns
    only (the rows' plain prior beside it), sharded, equal one device; every sparse product
    on the GPUs' hot path (segment sums: the link blocks' padding entries dropped by their
    out-of-range row ids)."""
    diffs = check_equal(_four_devices("full", "segment"))
    tags = {tuple(k.split("/")[:2]) for k in diffs}
    assert {
        ("side+implicit", "four"),
        ("side+implicit", "three_checkpointed"),
        ("cols-side", "four"),
    } <= tags


def test_an_array_without_a_sharded_layout_is_refused():
    """A link array the sharded sweep does not know how to split is refused by name (not
    replicated by guess: its products over rows would be wrong)."""
    links = {"M/X": None, "M/V": None, "N/XV": None, "N/d": None, "N/V": None}
    assert link_layout(links) == {
        "M/X": "rows",
        "M/V": "replicated",
        "N/XV": "rows",
        "N/d": "replicated",
        "N/V": "replicated",
    }
    with pytest.raises(ValueError, match="'M/P' has no sharded layout.*drop devices="):
        link_layout({**links, "M/P": np.zeros(3)})


def test_the_row_side_decomposition_is_refused_on_a_mesh():
    """A link decomposed on its rows (no ``V``: more than 4,096 features, fewer rows) keeps
    its ``B`` through ``X`` itself, which a device holds only a block of: refused by name."""
    with pytest.raises(ValueError, match="link of N uses the row-side decomposition.*devices="):
        link_layout({"M/X": None, "M/V": None, "M/d": None, "N/X": None, "N/d": None})
