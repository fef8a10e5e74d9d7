"""A fifth prior is one module: dropping it into ``bmczoo/priors/`` makes it available
everywhere, end to end, with no other file touched.

The package is copied to a temporary folder and ``probe_point.py`` added to its
``priors/``: a prior the zoo does not have (gamma_h uniform on three points, with its
own Gibbs conditional, VB factor, q(gamma) draws and tail probabilities, active
threshold and Gibbs starts).  Fresh interpreters on the copy then run the command line
(``bmczoo fit --prior probe-point``, Gibbs and VB) and, in Python, Gibbs and VB fits,
their ArviZ conversion, rank posterior, summary table and report, the ``--help`` text
and a small experiments grid.
"""

import sys
import textwrap
from pathlib import Path

from _package_copy import copy_package, run_side_by_side

MODULE = textwrap.dedent(
    '''
    """A probe prior: ``gamma_h`` uniform on the three points ``lo < sqrt(lo hi) < hi``."""

    import dataclasses
    import math

    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    from .base import Prior, VBGamma, check_positive, set_fields

    _KEYS = ("q_lo", "q_mid", "q_hi")  # q(gamma_h = each point)


    @dataclasses.dataclass(frozen=True)
    class ProbePoint(Prior):
        lo: float = 0.02
        hi: float = 2.0
        name = "probe-point"
        cli_defaults = {"lo": 0.05, "hi": 1.0}
        tuned = "hi"

        def __post_init__(self):
            set_fields(self, check_positive("ProbePoint", lo=self.lo, hi=self.hi))
            if not self.lo < self.hi:
                raise ValueError(f"ProbePoint: need lo < hi, got lo={self.lo!r}, hi={self.hi!r}")

        def levels(self):
            return np.array([self.lo, math.sqrt(self.lo * self.hi), self.hi])

        def _log_weights(self, S, d):
            # log p(g_j) + log N(columns | 0, g_j) up to a constant, for the three points
            g = jnp.asarray(self.levels(), S.dtype)
            return -math.log(3.0) - 0.5 * d * jnp.log(g) - S[..., None] / (2.0 * g)

        def sample_gamma(self, K, d):
            z = numpyro.sample("gamma_level", dist.Categorical(probs=jnp.full(3, 1.0 / 3.0)).expand([K]).to_event(1))
            return numpyro.deterministic("gamma", jnp.asarray(self.levels())[z])

        def sample_conditional(self, key, S, d):
            z = jax.random.categorical(key, self._log_weights(S, d), axis=-1)
            return jnp.asarray(self.levels(), S.dtype)[z]

        def vb_update(self, ES, d):
            lw = self._log_weights(ES, d)
            q = jax.nn.softmax(lw, axis=-1)
            g = jnp.asarray(self.levels(), ES.dtype)
            return VBGamma(inv_mean=jnp.sum(q / g, axis=-1), log_normalizer=jax.nn.logsumexp(lw, axis=-1),
                           params={k: q[..., j] for j, k in enumerate(_KEYS)})

        def init_gamma(self, K, d, dtype=jnp.float32):
            return jnp.full((K,), self.hi, dtype)

        def q_sample(self, params, num_draws, rng):
            q = np.stack([np.asarray(params[k], np.float64) for k in _KEYS], axis=-1)  # (K, 3)
            u = rng.random((num_draws,) + q.shape[:-1])
            z = np.sum(u[..., None] > np.cumsum(q, axis=-1)[..., :-1], axis=-1)  # inverse CDF
            return self.levels()[z]

        def q_prob_above(self, params, threshold):
            above = self.levels() > threshold
            return sum(np.asarray(params[k], np.float64) * a for k, a in zip(_KEYS, above))

        def active_threshold(self):
            """Between the middle and the top point: counts the columns at the top."""
            return (self.lo * self.hi**3) ** 0.25

        def gibbs_starts(self):
            return [("top", self.hi), ("bottom", self.lo)]
    '''
)

# every Python-side check, in one fresh interpreter on the copied package
CHECKS = textwrap.dedent(
    """
    import contextlib, io, math, sys, tempfile
    from pathlib import Path
    import numpy as np
    import bmczoo as bmc
    from bmczoo import diagnostics as dg
    from bmczoo.cli import main

    assert Path(bmc.__file__).resolve().parent == Path(sys.argv[1]).resolve(), bmc.__file__
    tmp = Path(sys.argv[2])

    # found by name, with the class's command-line defaults
    assert "probe-point" in bmc.priors.registry()
    p = bmc.priors.get_prior("probe-point", hi=1.5)
    assert isinstance(p, bmc.priors.ProbePoint) and (p.lo, p.hi) == (0.02, 1.5)
    assert bmc.priors.ProbePoint.from_cli() == bmc.priors.ProbePoint(lo=0.05, hi=1.0)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main(["fit", "--help"])
    assert "probe-point (lo=0.05, hi=1)" in " ".join(buf.getvalue().split()), buf.getvalue()

    prior = bmc.priors.ProbePoint(lo=0.05, hi=1.0)
    levels = prior.levels()
    train = bmc.datasets.simulate_paper(20, seed=0).train
    gibbs = bmc.fit(train, K=2, prior=prior, method="gibbs", num_warmup=5, num_samples=20, thinning=1,
                    progress_bar=False)
    vb = bmc.fit(train, K=2, prior=prior, method="vb", max_iter=10, progress_bar=False)
    t = dg.gamma_threshold(gibbs)
    assert t == dg.gamma_threshold(vb) == prior.active_threshold()
    for fit in (gibbs, vb):
        post = fit.to_arviz(num_draws=400) if fit is vb else fit.to_arviz()
        g = post.posterior["gamma"].values
        assert g.shape[-1] == 2 and post.posterior["gamma_sorted"].shape == g.shape
        assert np.all(np.min(np.abs(g[..., None] - levels), axis=-1) < 1e-6 * levels.max()), g
        for thr in (t, 0.0, 0.1, 2.0):
            r = dg.rank_posterior(fit, thr)
            assert r.shape == (3,) and np.all(r >= 0) and abs(r.sum() - 1.0) < 1e-9, r
            # the rank posterior agrees with the draws of gamma (exactly for Gibbs, by
            # Monte Carlo from q(gamma) for VB)
            counts = np.bincount(np.sum(g > thr, -1).ravel(), minlength=3) / g[..., 0].size
            if fit is gibbs:
                assert np.array_equal(r, counts), (r, counts)
            else:
                assert np.allclose(r, counts, atol=0.1), (r, counts)
        table = dg.summary(fit, num_draws=100)
        assert "theta_fro" in table.index and "gamma_sorted[0]" in table.index
        written = dg.report(fit, tmp / fit.method, num_draws=100)
        assert {"summary.md", "rank_posterior.csv", "gamma.png"} <= {w.name for w in written}
        assert f"threshold {t:.4g}" in (tmp / fit.method / "summary.md").read_text()
    # exact VB probabilities are the prior's q_prob_above
    q = {k: np.asarray(v, np.float64) for k, v in vb.q_gamma.items()}
    assert np.allclose(dg.prob_gamma_above(vb, t), prior.q_prob_above(q, t))

    # EXPERIMENTS
    print("ok")
    """
)

# a small experiments grid with the new prior (bmczoo.experiments.run_grid)
EXPERIMENTS = textwrap.dedent(
    """
    from bmczoo.experiments import GridCell, Settings, run_grid
    fast = Settings(seeds=(0,), num_warmup=3, num_samples=6, thinning=3, vb_max_iter=10)
    (row,) = run_grid([GridCell("m=20", 20, 2, "probe-point")], settings=fast, out=tmp / "grid", experiment="probe")
    assert row.prior == "probe-point" and row.paper_hyper == {"lo": 0.05, "hi": 1.0}, row
    assert row.selected_hyper["hi"] in (0.5, 1.0, 2.0) and row.selected_hyper["lo"] == 0.05, row
    assert row.selected_start in ("top", "bottom") and math.isfinite(row.rmse_selected) and row.rmse_selected > 0
    """
)


def test_new_prior_module_end_to_end(tmp_path):
    dst, changed = copy_package(
        tmp_path, lambda pkg: (pkg / "priors" / "probe_point.py").write_text(MODULE)
    )
    assert changed == {Path("priors/probe_point.py")}  # one file, nothing else
    code = CHECKS.replace("# EXPERIMENTS\n", EXPERIMENTS)
    assert "run_grid" in code
    cli = ["fit", "--data", "sim:30", "--prior", "probe-point", "-K", "2", "--quiet"]
    runs = {
        "python": [sys.executable, "-c", code, str(dst), str(tmp_path)],
        "cli gibbs": [
            sys.executable,
            "-m",
            "bmczoo",
            *cli,
            "--method",
            "gibbs",
            "--num-warmup",
            "5",
            "--num-samples",
            "20",
            "--thinning",
            "1",
        ],
        "cli vb": [sys.executable, "-m", "bmczoo", *cli, "--method", "vb", "--max-iter", "10"],
    }
    outs = run_side_by_side(runs, tmp_path)  # the three interpreters at once
    assert outs["python"].strip().endswith("ok")
    for name in ("cli gibbs", "cli vb"):
        lines = outs[name].strip().splitlines()
        assert "prior: probe-point(lo=0.05, hi=1), K=2" in "\n".join(lines), lines
        assert lines[-1].startswith("theta_rmse=") and float(lines[-1].split("=")[1]) > 0, lines
