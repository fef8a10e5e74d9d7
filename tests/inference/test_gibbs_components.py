"""The Gibbs engine with the new components (Normal-Wishart rows, learned noise, biases;
docs/algorithms.md, "The Gibbs blocks"), through ``bmc.fit``.  The conditionals themselves
are checked in
``tests/priors/test_normal_wishart.py`` / ``test_component_conditionals.py`` and the joint
by the Geweke tests (``test_geweke_components.py``); here:

* **Gibbs vs NUTS** (``slow``): on a 10 x 8 matrix with 40 ratings (K = 2, float64, no
  centring) both samplers' posterior means of theta at tracked entries (observed and not),
  of tau, of the bias variances and of ``tr(Lambda_M)``, ``tr(Lambda_N)`` (invariant under
  the orthogonal rotations that leave the posterior unchanged), and the sds of theta, agree:
  ``|a - b| < z_crit sqrt(mcse_a^2 + mcse_b^2)`` with ArviZ's ESS-based MCSE of each
  sampler's 4 chains, ``z_crit`` the two-sided Bonferroni threshold for familywise level 1%;
  both samplers must first reach R-hat < 1.05.
* **Sharded = serial** (``slow``, a child process with 4 CPU devices): the fit with all three
  components on 1, 4 and 3 devices (43 x 30: padding rows; the 3-device run checkpointed)
  gives the same draws of everything up to float64 rounding (``sqrt(eps)`` relative, as in
  ``test_sharding.py``; wrong rows, keys or padding give differences of order one).
* **Checkpoint resume**: a run with all three components interrupted twice (a
  ``KeyboardInterrupt`` raised by the progress bar between segments, as Ctrl-C would, once
  right after a checkpoint segment and once between checkpoints) and resumed gives exactly
  the draws of the uninterrupted run.
* **Predictions from stored factors**: ``fit.predict`` at entries not requested at fit time
  is the mean over draws of ``M_i . N_j + row_bias_i + col_bias_j`` plus the offset (no
  clipping), within a float64 rounding bound.
* **Learned noise recovers the noise level** on the paper's simulation (m = 100, rank 2,
  N(0, 1) noise): the central 99% interval of the draws of ``1 / sqrt(tau)`` contains 1
  (default suite: K = 2 with all three components; slow: K = 2 discrete, K = 5 inverse
  gamma, and the K = 5 discrete prior from its default start, a strict xfail: the chains
  stay in an all-slab mode that fits the noise).  Not asserted: Normal-Wishart + biases with
  K = 5 gives a noise sd ~6% low (median 0.93-0.945 on seeds 0-3) whose 99% interval only
  just reaches 1 or misses it, depending on the seed and chain length.
"""

from __future__ import annotations


import arviz as az
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import checkpoint as ck
from bmczoo.inference import run as run_loop

from ._devices import check_equal, run_four_devices
from ._geweke import bonferroni_z

EPS = np.finfo(np.float64).eps

ALL_THREE = dict(
    prior=bmc.priors.NormalWishart(), likelihood=bmc.likelihoods.LearnedNoise(), biases=True
)


# ============================================================================ Gibbs vs NUTS
M1, M2, N_RATINGS, K_SMALL = 10, 8, 40, 2


def _small_problem():
    """Rank-2 signal + row and column effects + N(0, 0.5^2) noise; tracked entries: two
    observed, two unobserved."""
    rng = np.random.default_rng(0)
    keys = np.sort(rng.choice(M1 * M2, N_RATINGS, replace=False))
    rows, cols = np.divmod(keys, M2)
    U, V = rng.normal(size=(M1, 2)), rng.normal(size=(M2, 2))
    b, c = rng.normal(size=M1), rng.normal(size=M2)
    y = (
        np.sum(U[rows] * V[cols], 1)
        + 0.5 * b[rows]
        + 0.5 * c[cols]
        + 0.5 * rng.normal(size=N_RATINGS)
    )
    observed = set(zip(rows.tolist(), cols.tolist()))
    entries = [(int(rows[0]), int(cols[0])), (int(rows[20]), int(cols[20]))]
    entries += [e for e in [(3, 7), (9, 0), (5, 5), (0, 1)] if e not in observed][:2]
    assert len(entries) == 4
    er, ec = (np.array(v) for v in zip(*entries))
    return bmc.RatingData(rows, cols, y, (M1, M2)), er, ec


NUTS_CONFIGS = {
    "all-three": ALL_THREE,
    "normal-wishart": dict(prior=bmc.priors.NormalWishart()),
    "learned": dict(
        prior=bmc.priors.InverseGamma(3.0, 2.0), likelihood=bmc.likelihoods.LearnedNoise()
    ),
    "biases": dict(prior=bmc.priors.InverseGamma(3.0, 2.0), biases=True),
}


def _quantities(s):
    """(chain, draw, q) arrays of the compared quantities, by name."""
    out = {"theta": np.asarray(s["theta"], np.float64)}
    if "tau" in s:
        out["tau"] = np.asarray(s["tau"], np.float64)[..., None]
    if "row_bias_var" in s:
        out["bias_var"] = np.stack(
            [np.asarray(s["row_bias_var"]), np.asarray(s["col_bias_var"])], -1
        )
    if "Lambda_M" in s:
        out["tr_Lambda"] = np.stack(
            [np.trace(np.asarray(s[f"Lambda_{f}"]), axis1=-2, axis2=-1) for f in "MN"], -1
        )
    return out


def _summ(x, method):
    ds = az.convert_to_dataset({"x": x})
    return az.mcse(ds, method=method)["x"].values, az.rhat(ds)["x"].values


@pytest.mark.slow
@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("config", list(NUTS_CONFIGS))
def test_gibbs_agrees_with_nuts(config):
    data, er, ec = _small_problem()
    comp = NUTS_CONFIGS[config]
    common = dict(
        K=K_SMALL,
        num_chains=4,
        thinning=1,
        center=False,
        clip=False,
        progress_bar=False,
        track=(er, ec),
        **comp,
    )
    nuts = bmc.fit(data, method="nuts", num_warmup=500, num_samples=1500, seed=0, **common)
    gibbs = bmc.fit(
        data,
        method="gibbs",
        num_warmup=500,
        num_samples=5000,
        seed=1,
        store_factors=False,
        **common,
    )
    qa, qb = _quantities(nuts.samples), _quantities(gibbs.samples)
    assert qa.keys() == qb.keys()
    z, lines = [], []
    for name in qa:
        a, b = qa[name], qb[name]
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        (ma, ra), (mb, rb) = _summ(a, "mean"), _summ(b, "mean")
        assert np.all(ra < 1.05) and np.all(rb < 1.05), f"{name}: R-hat nuts {ra}, gibbs {rb}"
        zm = (a.mean((0, 1)) - b.mean((0, 1))) / np.sqrt(ma**2 + mb**2)
        z.append(zm)
        lines.append(
            f"  {name} mean: nuts {np.round(a.mean((0, 1)), 4)} gibbs {np.round(b.mean((0, 1)), 4)} "
            f"z {np.round(zm, 2)}"
        )
        if name == "theta":
            (sa, _), (sb, _) = _summ(a, "sd"), _summ(b, "sd")
            zs = (a.std((0, 1), ddof=1) - b.std((0, 1), ddof=1)) / np.sqrt(sa**2 + sb**2)
            z.append(zs)
            lines.append(
                f"  theta sd: nuts {np.round(a.std((0, 1)), 4)} gibbs {np.round(b.std((0, 1)), 4)} "
                f"z {np.round(zs, 2)}"
            )
    z = np.concatenate(z)
    zc = bonferroni_z(z.size)
    assert np.max(np.abs(z)) < zc, (
        f"{config}: NUTS and Gibbs disagree (z_crit {zc:.2f}):\n" + "\n".join(lines)
    )


# ============================================================================ sharding
@pytest.mark.slow
def test_sharded_equals_serial_with_all_components():
    out = run_four_devices("components")
    assert out["devices"] == 4
    want = {
        "M",
        "N",
        "row_bias",
        "col_bias",
        "row_bias_var",
        "col_bias_var",
        "tau",
        "mu_M",
        "Lambda_M",
        "mu_N",
        "Lambda_N",
        "theta",
    }
    assert want <= set(out["keys"]), out["keys"]
    diffs = check_equal(out)  # same keys, shapes without padding; float64 rounding only
    assert any(k.startswith("three_checkpointed/") for k in diffs)


# ============================================================================ checkpoint, predict
def _ck_data():
    sim = bmc.datasets.simulate_paper(40, seed=1)
    return sim.train, sim.train.subset(np.arange(30))


def _ck_kw(test):
    return dict(
        K=3,
        num_warmup=10,
        num_samples=37,
        thinning=4,
        num_chains=2,
        progress_bar=False,
        seed=3,
        store_factors=True,
        test=test,
        clip=False,
        dtype="float64",
        **ALL_THREE,
    )


@pytest.fixture(scope="module")
def full_run():
    train, test = _ck_data()
    return bmc.fit(train, **_ck_kw(test))


class _Interrupt(Exception):
    pass


def _interrupting_update(stop):
    """The run loop's progress update, raising KeyboardInterrupt (Ctrl-C between two
    compiled chunks of the run) at its first call that reports an iteration ``it`` with
    ``stop(it)``: the run then saves its work up to ``it``."""
    update = run_loop.Progress.update

    def interrupting(self, it, n, seconds):
        if stop(it):
            raise KeyboardInterrupt
        return update(self, it, n, seconds)

    return interrupting


@pytest.mark.slow  # four fits, each compiled anew (~1 min on 2 cores)
def test_checkpoint_resume_is_exact_with_all_components(tmp_path, monkeypatch, full_run):
    train, test = _ck_data()
    kw = _ck_kw(test)
    path = tmp_path / "run.npz"
    total = kw["num_warmup"] + kw["num_samples"]
    done = []
    # checkpoint_every=9 (a chunk ends at every checkpoint): the first run stopped at its
    # first checkpoint, the resumed run between two checkpoints, so that the last resume
    # restores a Ctrl-C's state, not a checkpoint's
    stops = (lambda it: it >= 9, lambda it: it > done[0] and it % 9 != 0)
    for stop in stops:
        monkeypatch.setattr(run_loop.Progress, "update", _interrupting_update(stop))
        with pytest.raises(KeyboardInterrupt, match="interrupted after"):
            bmc.fit(train, checkpoint=path, checkpoint_every=9, **kw)
        _, arrays = ck.load_npz(path)
        done.append(int(arrays["state/iteration"]))
    monkeypatch.undo()
    assert done[0] == 9 and done[0] < done[1] < total, done
    assert done[1] % 9 != 0, done  # the second interrupt fell between checkpoints
    resumed = bmc.fit(train, checkpoint=path, checkpoint_every=9, **kw)
    a, b = full_run, resumed
    assert {"mu_M", "Lambda_N", "tau", "row_bias", "col_bias_var", "M"} <= set(a.samples)
    assert a.samples.keys() == b.samples.keys()
    for k in a.samples:
        np.testing.assert_array_equal(np.asarray(b.samples[k]), np.asarray(a.samples[k]), err_msg=k)
    for f in ("pred_mean", "rmse_draw", "rmse_mean"):
        np.testing.assert_array_equal(
            np.asarray(getattr(b, f)), np.asarray(getattr(a, f)), err_msg=f
        )


def test_predict_from_stored_factors_includes_biases(full_run):
    fit = full_run
    train, test = _ck_data()
    s = {k: np.asarray(v, np.float64) for k, v in fit.samples.items()}
    assert fit.info.shift.clip is None
    offset = fit.info.shift.offset
    m1, m2 = fit.shape
    rr, cc = np.divmod(np.arange(m1 * m2), m2)  # every entry: most were not requested at fit time
    terms = [
        np.einsum("cdek,cdek->cde", s["M"][:, :, rr], s["N"][:, :, cc]),
        s["row_bias"][:, :, rr],
        s["col_bias"][:, :, cc],
    ]
    want = sum(terms).mean(axis=(0, 1)) + offset
    got = fit.predict(rr, cc)
    # rounding bound: K products + 2 biases per draw, a mean over D draws, one offset, each
    # computation; relative to the largest term
    K, D = s["M"].shape[-1], s["M"].shape[0] * s["M"].shape[1]
    scale = np.max(
        np.abs(s["M"][:, :, rr] * s["N"][:, :, cc]).sum(-1) + np.abs(terms[1]) + np.abs(terms[2]),
        (0, 1),
    )
    bound = 2 * (K + 3 + D) * EPS * (scale + abs(offset))
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)
    # without the biases the prediction is clearly different (they are not negligible)
    assert np.max(np.abs(want - (terms[0].mean((0, 1)) + offset))) > 1e3 * np.max(bound)
    # the fit-time predictions at the test entries (running sums) are the same draws' mean
    tw = (
        np.einsum("cdek,cdek->cde", s["M"][:, :, test.rows], s["N"][:, :, test.cols])
        + s["row_bias"][:, :, test.rows]
        + s["col_bias"][:, :, test.cols]
    ).mean((0, 1)) + offset
    np.testing.assert_allclose(fit.predict(test.rows, test.cols), tw, rtol=0, atol=np.max(bound))
    # tracked theta (per draw) is M_i . N_j + b_i + c_j too, without the offset
    tr, tc = fit.track_rows, fit.track_cols
    th = (
        np.einsum("cdek,cdek->cde", s["M"][:, :, tr], s["N"][:, :, tc])
        + s["row_bias"][:, :, tr]
        + s["col_bias"][:, :, tc]
    )
    np.testing.assert_allclose(s["theta"], th, rtol=0, atol=np.max(bound))


# ============================================================================ learned noise
COVERAGE = [
    pytest.param(2, "all-three", ALL_THREE, id="K2-all-three"),
    pytest.param(
        2,
        "discrete",
        dict(prior=bmc.priors.Discrete(), likelihood=bmc.likelihoods.LearnedNoise()),
        id="K2-discrete",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        5,
        "inverse-gamma",
        dict(prior=bmc.priors.InverseGamma(), likelihood=bmc.likelihoods.LearnedNoise()),
        id="K5-inverse-gamma",
        marks=pytest.mark.slow,
    ),
    # K = 5 > true rank 2: with the column moves (the default) the extra columns leave the slab
    pytest.param(
        5,
        "discrete",
        dict(prior=bmc.priors.Discrete(), likelihood=bmc.likelihoods.LearnedNoise()),
        id="K5-discrete",
        marks=pytest.mark.slow,
    ),
    # Finding of the paper's plain sweep (the Gibbs blocks pass the Geweke tests and the draws
    # of tau are exactly Gamma(a + n/2, b + SSE/2) given the same draw's factors, KS p = 0.42):
    pytest.param(
        5,
        "discrete-plain",
        dict(
            prior=bmc.priors.Discrete(),
            likelihood=bmc.likelihoods.LearnedNoise(),
            column_moves=False,
        ),
        id="K5-discrete-plain-sweep",
        marks=[
            pytest.mark.slow,
            pytest.mark.xfail(
                strict=True,
                reason="metastable without the column moves: from the default start (every "
                "gamma_h = C) all five columns stay in the slab and fit noise (noise sd 0.84 [0.79, 0.89]); "
                "started with three columns at eps they stay there and the interval [0.95, 1.04] covers 1",
            ),
        ],
    ),
]


def _noise_sd_draws(K, comp, seed=0, **kw):
    sim = bmc.datasets.simulate_paper(100, seed=seed)  # rank 2, N(0, 1) noise, n = 2000
    assert sim.noise_sd == 1.0
    fit = bmc.fit(
        sim.train,
        K=K,
        num_warmup=150,
        num_samples=300,
        thinning=1,
        num_chains=2,
        seed=seed,
        progress_bar=False,
        **comp,
        **kw,
    )
    return 1.0 / np.sqrt(np.asarray(fit.samples["tau"], np.float64)), fit


@pytest.mark.parametrize("K, name, comp", COVERAGE)
def test_learned_noise_covers_the_true_noise_sd(K, name, comp):
    sd, _ = _noise_sd_draws(K, comp)
    lo, med, hi = np.quantile(sd, [0.005, 0.5, 0.995])
    assert lo < 1.0 < hi, (
        f"K={K} {name}: 99% interval of the noise sd [{lo:.4f}, {hi:.4f}] (median {med:.4f})"
    )


@pytest.mark.slow
def test_discrete_K5_started_in_the_spike_covers_the_noise_sd():
    """The companion of the K5-discrete plain-sweep finding: the same fit started with the
    three extra columns in the spike (``init_gamma``) keeps them there and recovers the
    noise sd."""
    comp = dict(
        prior=bmc.priors.Discrete(), likelihood=bmc.likelihoods.LearnedNoise(), column_moves=False
    )
    sd, fit = _noise_sd_draws(5, comp, init_gamma=(1.0, 1.0, 0.05, 0.05, 0.05))
    lo, hi = np.quantile(sd, [0.005, 0.995])
    assert lo < 1.0 < hi, (lo, hi)
    slab = (np.asarray(fit.samples["gamma"]) == 1.0).mean(axis=(0, 1))
    assert np.all(slab[2:] == 0.0), slab
