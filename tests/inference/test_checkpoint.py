"""Checkpoint / resume: the Gibbs driver reproduces NumPyro's MCMC run exactly,
a run interrupted by Ctrl-C (a real SIGINT) and resumed produces exactly the draws of an
uninterrupted run, and a checkpoint of another run is refused.

"Exactly" is what :func:`bmczoo.inference.checkpoint.resume_guarantee` states for the
backend the test runs on: bit for bit on CPU, within a float tolerance elsewhere (GPU
reductions are not deterministic); the tests check that guarantee, whichever it is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _native
from bmczoo import linalg as kr
from bmczoo.inference import checkpoint as ck
from bmczoo.inference.run import donated

SCRIPT = Path(__file__).parent / "scripts" / "interrupt_run.py"


def _data():
    sim = bmc.datasets.simulate_paper(40, seed=1)
    return sim.train, sim.train.subset(np.arange(30))


def _gibbs_kw(test, **over):
    kw = dict(
        K=3,
        prior=bmc.priors.Discrete(),
        num_warmup=10,
        num_samples=37,
        thinning=4,
        num_chains=2,
        progress_bar=False,
        seed=3,
        store_factors=True,
        test=test,
    )
    kw.update(over)
    return kw


def _same(a, b, err_msg=""):
    """``b`` (resumed / checkpointed) equals ``a`` (uninterrupted) as this backend promises
    for the runs' dtype (the default one: float32)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (err_msg, a.shape, b.shape)
    ck.resume_guarantee().check(a, b, err_msg=err_msg)


def test_resume_guarantee_per_backend():
    assert ck.resume_guarantee(np.float32, "cpu") == ck.ResumeGuarantee("cpu", True, 0.0)
    g32, g64 = ck.resume_guarantee(np.float32, "gpu"), ck.resume_guarantee(np.float64, "gpu")
    assert not g32.exact and 1e-3 < g32.rtol < 1e-2 and 1e-8 < g64.rtol < 1e-6
    g32.check(np.array([1.0, 100.0]), np.array([1.0 + 1e-4, 100.01]))
    with pytest.raises(AssertionError):
        g32.check(np.array([1.0, 2.0]), np.array([1.0, 2.1]))
    with pytest.raises(AssertionError):
        ck.resume_guarantee(np.float32, "cpu").check(
            np.array([1.0]), np.array([np.nextafter(1.0, 2.0)])
        )


def _assert_same_gibbs(a, b):
    assert a.samples.keys() == b.samples.keys()
    for k in a.samples:
        _same(a.samples[k], b.samples[k], err_msg=k)
    _same(a.pred_mean, b.pred_mean, "pred_mean")
    _same(a.pred_var, b.pred_var, "pred_var")  # the running sums of theta^2 resume too
    _same(a.rmse_draw, b.rmse_draw, "rmse_draw")
    _same(a.rmse_mean, b.rmse_mean, "rmse_mean")


def _assert_resumed_equals_full(method: str, full, resumed) -> None:
    """A resumed Gibbs or VB fit equals the uninterrupted one (draws, resp. q and ELBO)."""
    if method == "gibbs":
        _assert_same_gibbs(full, resumed)
    else:
        for f in ("m", "n", "V_diag", "W_diag", "elbo"):
            _same(getattr(full, f), getattr(resumed, f), err_msg=f)


def _numpyro_reference(fit, train, test, kw):
    """The same chains run by NumPyro's ``MCMC`` with :class:`~bmczoo.inference.ConjugateGibbs`
    (the same seed, keys and settings as ``bmc.fit``'s driver): ``(samples, last core state)``."""
    from numpyro.infer import MCMC

    from bmczoo.inference import ConjugateGibbs
    from bmczoo.offsets import GlobalMean

    sh = fit.info.shift
    kernel = ConjugateGibbs(
        num_samples=kw["num_samples"],
        thinning=kw["thinning"],
        predict=(fit.pred_rows, fit.pred_cols),
        test_values=np.asarray(test.values),
        offset=sh.offset,
        clip=sh.clip,
        track=(fit.track_rows, fit.track_cols),
        store_factors=kw["store_factors"],
        column_moves=fit.info.settings.column_moves,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=kw["num_warmup"],
        num_samples=kw["num_samples"],
        thinning=kw["thinning"],
        num_chains=kw["num_chains"],
        chain_method="vectorized",
        progress_bar=False,
    )
    data, _ = GlobalMean().prepare(train)  # what bmc.fit fits: the centred ratings
    mcmc.run(jax.random.key(kw["seed"]), data, kw["K"], kw["prior"])
    return mcmc.get_samples(group_by_chain=True), mcmc.last_state.core


def test_driver_equals_numpyro_mcmc(tmp_path):
    """bmc.fit's driver (with and without checkpoints) runs the chains NumPyro's MCMC runs
    with the conjugate kernel: the same draws and running sums (up to rounding); with a
    checkpoint, bit for bit the same as without."""
    train, test = _data()
    kw = _gibbs_kw(test)
    a = bmc.fit(train, **kw)
    samples, core = _numpyro_reference(a, train, test, kw)
    assert a.samples.keys() == samples.keys()
    # NumPyro compiles its loop with XLA's default options, the driver with
    # bmczoo._xla.compile's: the same draws up to the rounding of two compilations, which
    # the float32 chains carry along (as a GPU's reductions: the tolerance of that guarantee)
    rounding = ck.ResumeGuarantee("cpu", False, ck.resume_guarantee(np.float32, "gpu").rtol)
    for k in samples:
        rounding.check(np.asarray(samples[k]), np.asarray(a.samples[k]), err_msg=k)
    pred = np.asarray(core.stats.pred_sum, np.float64).mean(0) / int(core.stats.num_kept)
    rounding.check(pred + a.info.shift.offset, a.pred_theta + a.info.shift.offset, "pred_theta")
    b = bmc.fit(train, checkpoint=tmp_path / "run.npz", checkpoint_every=7, **kw)
    _assert_same_gibbs(a, b)
    # a finished checkpoint is loaded, not rerun
    c = bmc.fit(train, checkpoint=tmp_path / "run.npz", checkpoint_every=7, **kw)
    _assert_same_gibbs(a, c)


def _progress(path: Path, method: str) -> int:
    """Number of checkpoints written so far (0 while there is no file)."""
    if not path.exists():
        return 0
    _, arrays = ck.load_npz(path)  # written by rename: never half-written
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from interrupt_run import arguments
    finally:
        sys.path.pop(0)
    every = arguments(method)[1]["checkpoint_every"]
    done = int(arrays["state/iteration"]) if method == "gibbs" else arrays["elbo"].shape[0]
    return done // every


@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_resume_after_interrupt_gives_the_uninterrupted_run(tmp_path, method):
    """Ctrl-C (a real SIGINT) after the first checkpoint: the run saves the work done and
    stops; calling fit again resumes it, and the result equals an uninterrupted run."""
    path = tmp_path / "run.npz"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), method, str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # interrupt after the second checkpoint: by then every function of the run is compiled
    # (a SIGINT inside XLA's compiler is not what this test is about)
    deadline = time.monotonic() + 300
    while _progress(path, method) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "fewer than two checkpoints written"
        time.sleep(0.05)
    # Ctrl-C; pressed again if the first one was lost (a signal that lands in a finalizer
    # or a callback is reported as "ignored" by Python and the run goes on)
    presses = 0
    while True:
        proc.send_signal(signal.SIGINT)
        presses += 1
        try:
            out, err = proc.communicate(timeout=3)
            break
        except subprocess.TimeoutExpired:
            assert presses < 10, "the run does not stop on Ctrl-C"
    assert proc.returncode != 0, "the run finished before the interrupt; make it longer"
    assert "KeyboardInterrupt" in err, err
    if presses == 1:  # (a second press may interrupt the final save: the periodic one remains)
        assert "saved in" in err, err
    settings, arrays = ck.load_npz(path)
    spec = json.loads(out.splitlines()[0])
    if method == "gibbs":
        done = int(arrays["state/iteration"])
        assert 0 < done < spec["total"]
    else:
        assert 0 < arrays["elbo"].shape[0] < spec["total"]
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from interrupt_run import arguments
    finally:
        sys.path.pop(0)
    train, kw = arguments(method)
    kw["progress_bar"] = False
    resumed = bmc.fit(train, checkpoint=path, **kw)
    full = bmc.fit(train, **kw)
    _assert_resumed_equals_full(method, full, resumed)


@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_stop_request_saves_at_the_next_boundary(tmp_path, monkeypatch, method):
    """The command line's Ctrl-C (:func:`ck.request_stop` from its watcher thread): nothing
    to stop before the loop holds work; then the loop saves at its next boundary and raises
    KeyboardInterrupt saying where; the resumed run equals the uninterrupted one."""
    train, test = _data()
    if method == "gibbs":
        kw = _gibbs_kw(test, num_chains=1, checkpoint_every=20)
        from bmczoo.inference.gibbs import driver as gibbs_driver

        target, name = gibbs_driver, "_save"
    else:
        from bmczoo.inference.vb import driver as vb_driver

        kw = dict(
            K=3,
            prior=bmc.priors.InverseGamma(),
            method="vb",
            tol=0.0,
            max_iter=30,
            checkpoint_every=4,
            progress_bar=False,
            seed=3,
            test=test,
        )
        target, name = vb_driver._Runs, "advance"
    assert not ck.request_stop()  # no loop running
    real = getattr(target, name)
    calls = []

    def stop_on_the_second(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:  # what the watcher thread does on Ctrl-C
            assert ck.request_stop()
        return out

    monkeypatch.setattr(target, name, stop_on_the_second)
    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt, match="interrupted after .* saved in .*run.npz"):
        bmc.fit(train, checkpoint=path, **kw)
    monkeypatch.setattr(target, name, real)
    assert not ck.request_stop()  # the loop is gone: no request goes to it
    _, arrays = ck.load_npz(path)
    if (
        method == "gibbs"
    ):  # asked after the periodic checkpoint at sweep 40: stopped there, saved again
        assert int(arrays["state/iteration"]) == 40 and len(calls) == 3
    else:  # asked during the second iteration: stopped after it
        assert arrays["elbo"].shape[0] == 2 and len(calls) == 2
    resumed = bmc.fit(train, checkpoint=path, **kw)
    full = bmc.fit(train, **kw)
    _assert_resumed_equals_full(method, full, resumed)


def test_vb_checkpoint_continues_with_more_iterations(tmp_path):
    train, test = _data()
    kw = dict(
        K=3,
        prior=bmc.priors.InverseGamma(),
        method="vb",
        tol=0.0,
        num_chains=2,
        progress_bar=False,
        seed=3,
        test=test,
    )
    full = bmc.fit(train, max_iter=24, **kw)
    bmc.fit(train, max_iter=10, checkpoint=tmp_path / "vb.npz", checkpoint_every=4, **kw)
    more = bmc.fit(train, max_iter=24, checkpoint=tmp_path / "vb.npz", checkpoint_every=4, **kw)
    for f in ("m", "n", "V_diag", "W_diag", "elbo", "rmse_trace"):
        _same(getattr(full, f), getattr(more, f), err_msg=f)


def test_checkpoint_of_another_run_is_refused(tmp_path):
    train, test = _data()
    path = tmp_path / "run.npz"
    kw = _gibbs_kw(test, num_samples=8, thinning=1)
    bmc.fit(train, checkpoint=path, **kw)
    with pytest.raises(ValueError, match="different run: seed"):
        bmc.fit(train, checkpoint=path, **{**kw, "seed": 4})
    with pytest.raises(ValueError, match="different run: hyperparameters"):
        bmc.fit(train, checkpoint=path, **{**kw, "prior": bmc.priors.Discrete(eps=0.01)})
    with pytest.raises(ValueError, match="different run: data"):
        bmc.fit(train.with_values(train.values + 1.0), checkpoint=path, **{**kw, "center": False})
    with pytest.raises(ValueError, match="different run: method"):
        bmc.fit(train, checkpoint=path, method="vb", K=3, progress_bar=False, seed=3, test=test)
    # the rows' draw: the same law, other rounding, so not the uninterrupted run
    with pytest.raises(ValueError, match="different run: .*row_draw"):
        bmc.fit(train, checkpoint=path, **{**kw, "row_draw": "two-solves"})


@pytest.mark.skipif(not _native.available(), reason="the compiled Gram kernel is not built")
def test_checkpoint_names_the_gram_kernel(tmp_path):
    """A run whose sweeps take their Gram matrices from the compiled kernel (K >=
    GRAM_MIN_K on the "gram" path) and one on the sparse product round differently: a
    checkpoint of one is refused by the other, naming the kernel; a run below GRAM_MIN_K
    (the same sweeps on both paths) resumes across them."""
    train, test = _data()
    path = tmp_path / "k.npz"
    kw = _gibbs_kw(test, K=kr.GRAM_MIN_K, num_samples=4, thinning=1, num_chains=1)
    with kr.use_hot_path("bcsr"):
        bmc.fit(train, checkpoint=path, **kw)
    with kr.use_hot_path("gram"), pytest.raises(ValueError, match="different run: gram_kernel"):
        bmc.fit(train, checkpoint=path, **kw)
    small = dict(kw, K=3)
    with kr.use_hot_path("gram"):
        bmc.fit(train, checkpoint=tmp_path / "s.npz", **small)
    with kr.use_hot_path("bcsr"):
        bmc.fit(train, checkpoint=tmp_path / "s.npz", **small)  # no error


def test_bad_checkpoint_arguments(tmp_path):
    train, _ = _data()
    with pytest.raises(ValueError, match="checkpoint_every"):
        bmc.fit(train, K=2, checkpoint=tmp_path / "a.npz", checkpoint_every=0, progress_bar=False)
    with pytest.raises(
        ValueError, match="checkpoint= applies to method='gibbs' or 'vb', not to method='svi'"
    ):
        bmc.fit(train, K=2, method="svi", checkpoint=tmp_path / "a.npz", progress_bar=False)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a readable .npz"):
        bmc.fit(train, K=2, checkpoint=bad, num_samples=4, thinning=1, progress_bar=False)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A failure while writing leaves the previous checkpoint intact and no temporary file."""
    path = tmp_path / "c.npz"
    ck.save_npz(path, {"a": 1}, {"x": np.arange(3)})

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        ck.save_npz(path, {"a": 2}, {"x": np.arange(4)})
    settings, arrays = ck.load_npz(path)
    assert settings == {"a": 1} and arrays["x"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


def test_checkpoint_of_other_feature_links_is_refused(tmp_path):
    """The prior's feature links identify the run: a checkpoint written with implicit
    feedback on the rows is not resumed with it on the columns."""
    train, test = _data()
    kw = dict(
        K=2,
        num_warmup=2,
        num_samples=3,
        thinning=1,
        num_chains=1,
        progress_bar=False,
        seed=0,
        checkpoint=tmp_path / "run.npz",
        checkpoint_every=2,
    )
    bmc.fit(train, prior=bmc.priors.NormalWishart(implicit="rows"), **kw)
    with pytest.raises(ValueError, match="links"):
        bmc.fit(train, prior=bmc.priors.NormalWishart(implicit="cols"), **kw)


def test_donated_tells_arrays_given_up_to_a_call():
    """The loop's Ctrl-C branch saves only arrays that were not donated to the call in
    flight (keys included)."""
    keys = jax.random.split(jax.random.key(0), 2)
    x = jnp.ones(3)
    step = jax.jit(lambda a, k: (a + 1, k), donate_argnums=(0, 1))
    y, keys2 = step(x, keys)
    assert donated({"x": x}) and donated(keys)
    assert not donated({"y": y, "k": keys2})


def test_a_resumed_run_compiles_no_start(tmp_path, monkeypatch):
    """A fresh run compiles its start beside the sweeps; a run resumed from its checkpoint
    starts from the saved state and compiles the sweeps only (and equals the first)."""
    from bmczoo import _xla
    from bmczoo.inference.gibbs import driver

    train, test = _data()
    path = tmp_path / "run.npz"
    kw = _gibbs_kw(test, num_samples=8, thinning=1)
    compiled, compile = [], _xla.compile

    def counting(lowered):
        compiled.append(lowered)
        return compile(lowered)

    monkeypatch.setattr(driver._xla, "compile", counting)
    first = bmc.fit(train, checkpoint=path, **kw)
    assert len(compiled) == 2  # the start and the sweeps
    compiled.clear()
    again = bmc.fit(train, checkpoint=path, **kw)
    assert len(compiled) == 1
    np.testing.assert_array_equal(first.samples["gamma"], again.samples["gamma"])
