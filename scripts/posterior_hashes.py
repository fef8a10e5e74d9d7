"""sha256 of the posterior draws of five members on a small synthetic problem.

A change that must leave the existing samplers' draws bit for bit equal (a refactor of the
sweep, a new component beside the others) is checked by running this script before and
after it (for example in a ``git worktree`` of the earlier commit) and comparing the
lines::

    python scripts/posterior_hashes.py > after.txt

Each line: the member, the number of chains, and the sha256 of its kept draws (every
variable, the factor draws included, in name order, as float64 bytes).
"""

from __future__ import annotations

import argparse
import hashlib

import jax
import numpy as np

import bmczoo as bmc


def _data() -> bmc.RatingData:
    rng = np.random.default_rng(0)
    m1, m2, K = 40, 30, 3
    theta = rng.normal(size=(m1, K)) @ rng.normal(size=(m2, K)).T
    r, c = np.nonzero(rng.random((m1, m2)) < 0.4)
    y = np.clip(np.round(3.0 + theta[r, c] + 0.5 * rng.normal(size=r.size)), 1, 5)
    return bmc.RatingData(r, c, y, (m1, m2))


def members() -> dict:
    """The five members: each prior family, the components and the moves."""
    return {
        "inverse-gamma": dict(prior=bmc.priors.InverseGamma()),
        "discrete+moves": dict(prior=bmc.priors.Discrete()),
        "gamma+fused-moves": dict(prior=bmc.priors.Gamma(), fuse_column_moves=True),
        "normal-wishart+learned+biases": dict(
            prior=bmc.priors.NormalWishart(),
            likelihood=bmc.likelihoods.LearnedNoise(),
            biases=bmc.offsets.Biases(),
        ),
        "fixed+ordered-probit": dict(
            prior=bmc.priors.Fixed(), likelihood=bmc.likelihoods.OrderedProbit()
        ),
    }


def digest(fit) -> str:
    h = hashlib.sha256()
    for name in sorted(fit.samples):
        h.update(name.encode())
        h.update(np.ascontiguousarray(np.asarray(fit.samples[name], np.float64)).tobytes())
    return h.hexdigest()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    data = _data()
    for name, kw in members().items():
        for chains in args.chains:
            fit = bmc.fit(
                data,
                K=5,
                method="gibbs",
                num_warmup=20,
                num_samples=30,
                num_chains=chains,
                seed=1,
                store_factors=True,
                progress_bar=False,
                **kw,
            )
            print(f"{name:32s} chains={chains} {digest(fit)}", flush=True)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}")


if __name__ == "__main__":
    main()
