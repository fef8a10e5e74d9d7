"""A new likelihood is one module: dropping it into ``bmczoo/likelihoods/`` makes it
available everywhere, end to end, with no other file touched.

The package is copied to a temporary folder and ``probe_cauchy.py`` added to its
``likelihoods/``: Cauchy noise of a fixed scale (a likelihood the zoo does not have), as
a scale mixture of normals with per-rating weights ``w_k ~ Gamma(1/2, 1/2)`` (its own
Gibbs block), its NumPyro statement and its density.  Fresh interpreters on the copy then
run the command line (``bmczoo fit --likelihood probe-cauchy``, its ``--help``) and, in
Python, the registry, Gibbs and NUTS fits, the log predictive density and the ArviZ
conversion's log likelihood (the module's density), and VB's refusal.
"""

import sys
import textwrap
from pathlib import Path

from _package_copy import copy_package, run_side_by_side

MODULE = textwrap.dedent(
    '''
    """A probe likelihood: Cauchy noise of a fixed scale."""

    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    from .base import Likelihood


    @dataclasses.dataclass(frozen=True)
    class ProbeCauchy(Likelihood):
        scale: float = 1.0
        name = "probe-cauchy"
        cli_help = "Cauchy noise of a fixed scale"
        weighted = True

        def precision(self, n):
            return 1.0 / self.scale**2

        def sample_weights(self, key, resid, tau):
            # w | r ~ Gamma(1, (1 + tau r^2) / 2): an exponential variate over the rate
            e = jax.vmap(lambda k: jax.random.exponential(k, resid.shape[1:], resid.dtype))(key)
            return e / (0.5 * (1.0 + tau[:, None] * resid * resid))

        def sample_obs(self, mean, n, obs):
            return numpyro.sample("obs", dist.Cauchy(mean, self.scale), obs=obs)

        def noise_variance(self, inv_tau):
            return np.inf

        def log_density(self, y, mean, inv_tau):
            from scipy import stats

            return stats.cauchy.logpdf(y, loc=mean, scale=np.sqrt(inv_tau))

        def noise_draws(self, rng, shape, inv_tau):
            return np.sqrt(inv_tau) * rng.standard_cauchy(shape)
    '''
)

CHECKS = textwrap.dedent(
    """
    import contextlib, io, sys
    from pathlib import Path
    import numpy as np
    from scipy import stats
    import bmczoo as bmc
    from bmczoo.cli import main

    assert Path(bmc.__file__).resolve().parent == Path(sys.argv[1]).resolve(), bmc.__file__
    assert bmc.likelihoods.registry()["probe-cauchy"] is bmc.likelihoods.ProbeCauchy
    lik = bmc.likelihoods.get_likelihood("probe_cauchy", scale=0.5)
    assert lik == bmc.likelihoods.ProbeCauchy(scale=0.5)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main(["fit", "--help"])
    text = " ".join(buf.getvalue().split())
    assert "probe-cauchy (Cauchy noise of a fixed scale)" in text, text
    assert "scale=1 (probe-cauchy)" in text, text

    sim = bmc.datasets.simulate_paper(20, seed=0)
    train, test = sim.train.split(test_fraction=0.2, seed=0)
    kw = dict(K=2, prior=bmc.priors.InverseGamma(), likelihood=lik, progress_bar=False)
    gibbs = bmc.fit(train, method="gibbs", num_warmup=10, num_samples=20, thinning=1,
                    store_factors=True, **kw)
    nuts = bmc.fit(train, method="nuts", num_warmup=20, num_samples=20, thinning=1, **kw)
    for fit in (gibbs, nuts):
        assert np.all(np.isfinite(fit.predict(test.rows, test.cols)))
        assert np.isfinite(fit.log_predictive_density(test))
    # the log likelihood of the ArviZ conversion is the module's density at the draws
    post = gibbs.to_arviz(log_likelihood=True)
    ll = post["log_likelihood"]["y"].values
    pp = post["posterior_predictive"]["y"].values
    assert ll.shape == pp.shape and np.all(np.isfinite(ll)), (ll.shape, pp.shape)
    # Cauchy: log density at most -log(pi scale), reached at the mode (a Gaussian's of the
    # same scale reaches -log(2 pi 0.25) / 2, above it)
    assert np.all(ll <= -np.log(np.pi * 0.5) + 1e-9) and ll.max() > -np.log(np.pi * 0.5) - 0.05
    try:
        bmc.fit(train, method="vb", **kw)
    except ValueError as e:
        assert "probe-cauchy likelihood's per-rating weights" in str(e), e
    else:
        raise AssertionError("VB ran a weighted likelihood")
    print("ok")
    """
)


def test_new_likelihood_module_end_to_end(tmp_path):
    dst, changed = copy_package(
        tmp_path, lambda pkg: (pkg / "likelihoods" / "probe_cauchy.py").write_text(MODULE)
    )
    assert changed == {Path("likelihoods/probe_cauchy.py")}  # one file, nothing else
    cli = [sys.executable, "-m", "bmczoo", "fit", "--data", "sim:30", "--prior", "inverse-gamma"]
    cli += ["--likelihood", "probe-cauchy", "--likelihood-opt", "scale=0.5", "-K", "2"]
    cli += ["--num-warmup", "5", "--num-samples", "10", "--thinning", "1", "--quiet"]
    runs = {"python": [sys.executable, "-c", CHECKS, str(dst)], "cli": cli}
    outs = run_side_by_side(runs, tmp_path)
    assert outs["python"].strip().endswith("ok")
    lines = outs["cli"].strip().splitlines()
    assert "likelihood: probe-cauchy" in "\n".join(lines), lines
    assert lines[-1].startswith("theta_rmse=") and float(lines[-1].split("=")[1]) > 0, lines
