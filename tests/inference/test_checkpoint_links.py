"""Checkpoint / resume of a Gibbs fit whose Normal-Wishart prior has feature links: the
link's state (``Bt``, ``lam_B`` with ``mu``, ``Lambda``) is saved with the chains, and a run
stopped at a checkpoint and resumed equals the uninterrupted run as the backend promises
(bit for bit on CPU; :func:`bmczoo.inference.checkpoint.resume_guarantee`)."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import checkpoint as ck
from bmczoo.inference.gibbs import driver as gibbs_driver

from .test_checkpoint import _assert_same_gibbs


def _data(seed=0, m1=14, m2=10):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random((m1, m2)) < 0.6)
    rf = bmc.data.Features.from_dense(rng.normal(size=(m1, 3)))
    cf = bmc.data.Features.from_dense(rng.integers(0, 2, size=(m2, 4)).astype(float))
    return bmc.RatingData(
        rows, cols, rng.normal(size=rows.size), (m1, m2), row_features=rf, col_features=cf
    )


def test_interrupted_linked_fit_resumes_to_the_uninterrupted_one(tmp_path, monkeypatch):
    """Side features and implicit feedback on both sides (learned noise, biases): a stop
    requested after the second checkpoint saves there; the resumed fit equals an
    uninterrupted one (every draw, the links' ``B`` included, and the running sums)."""
    train = _data()
    kw = dict(
        K=2,
        prior=bmc.priors.NormalWishart(row_features=True, col_features=True, implicit=True),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        num_warmup=6,
        num_samples=14,
        thinning=2,
        num_chains=2,
        seed=3,
        store_factors=True,
        test=train.subset(np.arange(20)),
        checkpoint_every=5,
        progress_bar=False,
    )
    real = gibbs_driver._save
    calls = []

    def stop_on_the_second(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:  # what the command line's Ctrl-C watcher does
            assert ck.request_stop()
        return out

    monkeypatch.setattr(gibbs_driver, "_save", stop_on_the_second)
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt, match="interrupted after"):
        bmc.fit(train, checkpoint=path, **kw)
    monkeypatch.setattr(gibbs_driver, "_save", real)
    _, arrays = ck.load_npz(path)
    assert int(arrays["state/iteration"]) == 10
    # the link's own state is in the checkpoint (B in the eigenbasis, its precision)
    saved = {k.rsplit("/", 1)[1] for k in arrays if k.startswith("state/")}
    assert {"Bt_M", "Bt_N", "lam_B_M", "lam_B_N"} <= saved, sorted(arrays)
    resumed = bmc.fit(train, checkpoint=path, **kw)
    full = bmc.fit(train, **{k: v for k, v in kw.items() if k != "checkpoint_every"})
    assert {"B_M", "B_N", "lam_B_M", "lam_B_N"} <= set(full.samples)
    _assert_same_gibbs(full, resumed)
