"""Why the discrete prior's slab-column count does not move between one and two on MovieLens 100K.

    python benchmarks/rank_movielens_probe.py [--data PATH] [--chains 4] [--warmup 100] [--samples 300]
                                              [--proposals 20] [--dtype float64|float32]
                                              [--anneal 20,100,400] [--replicas 4]

Runs ``bmc.fit`` with the column moves (the README's split, the paper's
``Discrete(1, .05, .07)``, K = 10, seed 0) and takes each chain's last state.  Per chain:

* the slab-column count, the training squared error, the log joint density (tempered
  likelihood, priors of M, N and gamma; same dimension for every chain, so comparable as
  densities but not as posterior masses: the slab and spike columns' volumes differ) and
  the top singular values of the slab part and of the spike part of ``theta = M N^T``
  (how much signal each holds);
* for a chain with one slab column, a switch-on aimed at the spike's signal: the spike block (rotation-invariant: equal scales) reflected so that the
  switched column carries the spike's highest-energy direction, then the flip of
  docs/algorithms.md, "Column moves" (one factor's column integrated out, the other rescaled by
  ``sqrt(C/eps)``), in both orientations; and a data-aimed birth: the new column drawn from
  its exact conditional given an aim (the top singular pair of the residual without that
  column, by power iteration), the own column integrated out, with the spike prior as the
  reverse proposal (median and best log acceptance over ``--proposals`` draws);
* for a chain with two slab columns, the switch-off that the reflected flip aims at (the
  slab reflected to its least-energy direction exactly: the mode of the move's angular
  proposal, whose proposal ratio is left out);
* for every chain, the annealed switch (``anneal_steps``, :func:`bmczoo.inference.gibbs.annealed_path`)
  of one spike column on and of one slab column off, over ``--anneal`` steps (median and
  best log acceptance over ``--replicas`` paths).

Each printed value is a log Metropolis-Hastings ratio: for the flips the log target ratio
(a reflection of an equal-scale block leaves the target unchanged; an aimed reflection's
proposal ratio is left out: at most ``(k - 1)/2 log(1001)`` nats for an angular central
Gaussian of concentration 1000 on ``k`` columns, 28 for the nine spike columns), for the
birth the full ratio.  All sums run over the ratings (per-rating residuals, float64 numpy);
the integrated column's marginal is the library's ``gibbs.column_log_marginal``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import REAL_100K, load_split  # noqa: E402  (the README's split)


def _segsum(x, idx, m):
    return np.bincount(idx, weights=x, minlength=m)


class Probe:
    """Per-rating quantities of one chain's state (``M``, ``N``, ``gamma``)."""

    def __init__(self, r, c, y, shape, prior, tb):
        self.r, self.c, self.y, (self.m1, self.m2) = r, c, y, shape
        self.C, self.eps, self.p, self.tb = prior.C, prior.eps, prior.p, tb

    def log_marginal(self, g, A, B):
        """The integrated column's marginal likelihood (the library's function)."""
        import jax
        import jax.numpy as jnp

        from bmczoo.inference.gibbs import column_log_marginal

        with jax.enable_x64(True):  # sums over ~10^3 rows of terms ~10^3: float64
            as1 = lambda x: jnp.asarray(np.atleast_1d(x), jnp.float64)  # noqa: E731
            return float(column_log_marginal(as1(g), as1(A)[None], as1(B)[None], as1(self.tb))[0])

    def residual(self, M, N, h):
        """``Y - theta`` at the ratings, without column ``h``."""
        return self.y - np.sum(M[self.r] * N[self.c], axis=1) + M[self.r, h] * N[self.c, h]

    def flip(self, M, N, h, g, g2, integrate: str):
        """Log target ratio of the flip ``gamma_h: g -> g2`` with ``integrate``'s column of
        ``h`` integrated out and the other rescaled by ``sqrt(g2/g)`` (its prior and the
        Jacobian cancel), plus the prior odds of gamma."""
        res = self.residual(M, N, h)
        if integrate == "M":
            f, own_idx, other_idx, m = N[:, h], self.r, self.c, self.m1
        else:
            f, own_idx, other_idx, m = M[:, h], self.c, self.r, self.m2
        s = np.sqrt(g2 / g)
        A, B = _segsum(f[other_idx] ** 2, own_idx, m), _segsum(res * f[other_idx], own_idx, m)
        odds = np.log(self.p / (1 - self.p)) * (1 if g2 > g else -1)
        return odds + self.log_marginal(g2, s * s * A, s * B) - self.log_marginal(g, A, B)

    def birth(self, M, N, h, rng, proposals: int, iters: int = 30):
        """Log acceptance ratios of a data-aimed switch-on of spike column ``h`` (``M_h``
        integrated out, ``N_h`` proposed from its conditional given the residual's top
        singular pair, a symmetric mixture over the sign; reverse proposal: the spike prior,
        which cancels the spike prior of the current ``N_h``)."""
        res = self.residual(M, N, h)
        r, c, m1, m2 = self.r, self.c, self.m1, self.m2
        v = np.ones(m2) / np.sqrt(m2)  # a fixed start: the aim depends on the residual only
        for _ in range(iters):
            u = _segsum(res * v[c], r, m1)
            u /= np.linalg.norm(u)
            v = _segsum(res * u[r], c, m2)
            sv = np.linalg.norm(v)
            v /= sv
        aim = u * np.sqrt(sv)
        P = 1.0 / self.C + self.tb * _segsum(aim[r] ** 2, c, m2)
        mean = self.tb * _segsum(res * aim[r], c, m2) / P

        def log_q(f):
            return (
                0.5 * np.sum(np.log(P / (2 * np.pi)))
                - np.log(2.0)
                + logsumexp(
                    [-0.5 * np.sum(P * (f - mean) ** 2), -0.5 * np.sum(P * (f + mean) ** 2)]
                )
            )

        def log_l(g, f):
            return self.log_marginal(g, _segsum(f[c] ** 2, r, m1), _segsum(res * f[c], r, m1))

        base = log_l(self.eps, N[:, h])
        out = []
        for _ in range(proposals):
            f = rng.choice([-1.0, 1.0]) * mean + rng.standard_normal(m2) / np.sqrt(P)
            log_prior = -0.5 * m2 * np.log(2 * np.pi * self.C) - 0.5 * f @ f / self.C
            out.append(
                np.log(self.p / (1 - self.p)) + log_prior + log_l(self.C, f) - base - log_q(f)
            )
        return np.array(out)


def _reflect(M, N, block, h, w):
    """``M``, ``N`` with the columns of ``block`` reflected by the Householder map ``e_h <-> w``
    (``w`` a unit vector in the block's coordinates)."""
    e = (block == h).astype(float)
    u = e - w
    if u @ u < 1e-12:
        return M.copy(), N.copy()
    H = np.eye(len(block)) - 2.0 * np.outer(u, u) / (u @ u)
    M2, N2 = M.copy(), N.copy()
    M2[:, block], N2[:, block] = M[:, block] @ H, N[:, block] @ H
    return M2, N2


def _top_sv(M, N, cols):
    if len(cols) == 0:
        return np.array([])
    _, rm = np.linalg.qr(M[:, cols])
    _, rn = np.linalg.qr(N[:, cols])
    return np.linalg.svd(rm @ rn.T, compute_uv=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=REAL_100K)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument(
        "--proposals", type=int, default=20, help="data-aimed birth proposals per spike column"
    )
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--anneal", default="20,100,400", help="path lengths of the annealed switch ('' for none)"
    )
    ap.add_argument("--replicas", type=int, default=4, help="annealed paths per chain and length")
    a = ap.parse_args(argv)
    if not a.data.exists():
        print(f"no data at {a.data}", file=sys.stderr)
        return 1

    import bmczoo as bmc

    tr, te, rows, cols, vals, shape = load_split(a.data, 0)
    train = bmc.RatingData(rows[tr], cols[tr], vals[tr], shape)
    prior = bmc.priors.Discrete(1.0, 0.05, 0.07)
    K = 10
    fit = bmc.fit(
        train,
        K=K,
        prior=prior,
        num_warmup=a.warmup,
        num_samples=a.samples,
        thinning=1,
        num_chains=a.chains,
        progress_bar=False,
        seed=a.seed,
        dtype=a.dtype,
        store_factors=False,
        track=0,
    )
    state = fit.mcmc.last_state.core
    offset = fit.info.shift.offset
    tb = float(fit.info.tau)  # the default tempered likelihood: a fixed precision (not learned)
    probe = Probe(rows[tr], cols[tr], vals[tr] - offset, shape, prior, tb)
    print(
        f"# {a.data} ({shape[0]} x {shape[1]}), {prior}, K = {K}, {a.chains} chains, {a.warmup} + {a.samples} "
        f"sweeps with the column moves, {a.dtype}, seed {a.seed}; block precision {tb:g}; each chain's last state"
    )
    rng = np.random.default_rng(a.seed)
    threshold = np.sqrt(prior.C * prior.eps)
    for ch in range(a.chains):
        M = np.asarray(state.M[ch], np.float64)
        N = np.asarray(state.N[ch], np.float64)
        g = np.asarray(state.prior_state["gamma"][ch], np.float64)
        slab, spike = np.where(g > threshold)[0], np.where(g <= threshold)[0]
        sse = float(np.sum((probe.y - np.sum(M[probe.r] * N[probe.c], axis=1)) ** 2))
        log_prior = sum(
            -(shape[0] + shape[1]) / 2 * np.log(2 * np.pi * g[h])
            - (M[:, h] @ M[:, h] + N[:, h] @ N[:, h]) / (2 * g[h])
            for h in range(K)
        )
        log_gamma = len(slab) * np.log(prior.p) + len(spike) * np.log(1 - prior.p)
        print(
            f"chain {ch}: {len(slab)} slab column(s) {slab.tolist()}; training SSE {sse:.1f}; log joint "
            f"{-0.5 * tb * sse + log_prior + log_gamma:.1f}; top singular values of theta's slab part "
            f"{np.round(_top_sv(M, N, slab)[:3], 1).tolist()}, spike part {np.round(_top_sv(M, N, spike)[:3], 1).tolist()}"
        )
        if len(slab) == 1 and len(spike):
            gram = M[:, spike].T @ M[:, spike] + N[:, spike].T @ N[:, spike]
            top = np.linalg.eigh(gram)[1][:, -1]
            h = spike[
                0
            ]  # the spike block is rotation-invariant: which column is switched does not matter
            M2, N2 = _reflect(M, N, spike, h, top)
            print(
                f"    switch-on of the spike's top-energy direction (reflected into column {h}): "
                f"log ratio {probe.flip(M2, N2, h, prior.eps, prior.C, 'M'):.1f} (M_h integrated), "
                f"{probe.flip(M2, N2, h, prior.eps, prior.C, 'N'):.1f} (N_h integrated)"
            )
            las = np.concatenate([probe.birth(M, N, hh, rng, a.proposals) for hh in spike])
            print(
                f"    data-aimed birth, {len(spike)} spike columns x {a.proposals} proposals: log acceptance "
                f"median {np.median(las):.1f}, best {np.max(las):.1f}"
            )
        elif len(slab) >= 2:
            gram = M[:, slab].T @ M[:, slab] + N[:, slab].T @ N[:, slab]
            low = np.linalg.eigh(gram)[1][:, 0]
            h = slab[0]
            M2, N2 = _reflect(M, N, slab, h, low)
            print(
                f"    switch-off of the slab's least-energy direction (reflected into column {h}): "
                f"log ratio {probe.flip(M2, N2, h, prior.C, prior.eps, 'M'):.1f} (M_h integrated), "
                f"{probe.flip(M2, N2, h, prior.C, prior.eps, 'N'):.1f} (N_h integrated)"
            )
        for steps in [int(x) for x in a.anneal.split(",") if x.strip()]:
            out = []
            for name, cols_ in (("on", spike), ("off", slab)):
                if len(cols_):
                    la = _annealed(
                        train,
                        offset,
                        fit.info.tau,
                        prior,
                        M,
                        N,
                        g,
                        int(cols_[0]),
                        steps,
                        a.replicas,
                        a.seed + 100 * ch + steps,
                    )
                    out.append(
                        f"{name} ({len(slab)} -> {len(slab) + (1 if name == 'on' else -1)}) median "
                        f"{np.median(la):.1f}, best {np.max(la):.1f}"
                    )
            print(f"    annealed switch, {steps} steps, {a.replicas} paths: " + "; ".join(out))
    return 0


def _annealed(train, offset, tau, prior, M, N, gamma, h: int, steps: int, replicas: int, seed: int):
    """Log acceptance ratios of ``replicas`` annealed switches of column ``h`` (float64)."""
    import jax
    import jax.numpy as jnp

    import bmczoo as bmc
    from bmczoo.inference import gibbs

    with jax.enable_x64(True):
        data = bmc.RatingData(train.rows, train.cols, train.values - offset, train.shape)
        problem = gibbs.build_problem(data, tau, dtype=jnp.float64)
        keys = jax.random.split(jax.random.key(seed), replicas)
        rep = lambda x: jnp.repeat(jnp.asarray(x, jnp.float64)[None], replicas, axis=0)  # noqa: E731
        state = gibbs.init(keys, problem, prior, M.shape[1], gamma=rep(gamma), M=rep(M), N=rep(N))
        path = jax.jit(
            lambda st, k: gibbs.annealed_path(st, problem, prior, k, jnp.full(replicas, h), steps)[
                3
            ]
        )
        return np.asarray(path(state, jax.random.split(jax.random.key(seed + 1), replicas)))


if __name__ == "__main__":
    raise SystemExit(main())
