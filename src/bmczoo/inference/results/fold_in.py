"""Folding new rows into a fit from the draws of its prior's variables (MCMC samples,
SVI draws) and the rows' feature link: the per-draw Gaussian conditionals of the new
rows' factors (:func:`~bmczoo.inference.results.outputs.fold_in_components`)."""

from __future__ import annotations

import numpy as np

from . import outputs as out

__all__ = ["fold_in_draws", "new_row_features"]


def fold_in_draws(fit, new, d, src):
    """Fold-in per draw (MCMC samples or SVI draws) from the draws' prior variables."""
    import jax.numpy as jnp

    info = fit.info
    m1, m2 = info.shape
    K = info.K
    S = d["N"].shape[0]
    template = info.prior.gibbs_state(K, m1, m2)
    missing = [k for k in template if k not in src]
    if missing:
        raise ValueError(
            f"fold_in needs the draws of the prior's variables ({', '.join(missing)}), which this "
            f"fit does not hold (MAP integrates the column scales out)"
        )
    state = {
        k: jnp.asarray(np.asarray(src[k], np.float64).reshape((S,) + tuple(t.shape)))
        for k, t in template.items()
    }
    if "M" in getattr(info.prior, "linked_sides", ()):
        prec, shift = _linked_row_prior(info.prior, new, src, S, K)
    else:
        (pM, shiftM), _ = info.prior.row_priors(state)
        prec = out.dense_precision(np.asarray(pM), K)
        shift = None if shiftM is None else np.asarray(shiftM, np.float64)
    if d["tau"] is not None:
        tau = d["tau"]
    else:
        tau = np.full(S, float(info.tau))
    tb = np.asarray(info.likelihood.block_precision(tau), np.float64)
    col_bias = rb_prec = rb_mean = None
    if info.biases is not None:
        if d["col_bias"] is None or "row_bias_var" not in src:
            raise ValueError(
                "fold_in with biases needs the draws of the column biases and the row-bias variance"
            )
        col_bias = d["col_bias"]
        rb_prec = 1.0 / np.asarray(src["row_bias_var"], np.float64).reshape(S)
        rb_mean = _linked_bias_mean(info.biases, new, src, S)
    means, covs = out.fold_in_components(
        new,
        N=d["N"],
        prior_prec=prec,
        prior_shift=shift,
        tb=tb,
        col_bias=col_bias,
        row_bias_prec=rb_prec if rb_mean is None else (rb_prec, rb_mean),
        offset=info.shift.offset,
    )
    return out.FoldInFit(
        fit,
        new,
        means,
        covs,
        d["N"],
        None,
        col_bias,
        None,
        fit.noise_var(),
        info.biases is not None,
    )


def _linked_row_prior(prior, new, src, S: int, K: int):
    """Per draw, the prior precision ``Lambda_M`` (S, K, K) and the per-row shifts
    ``Lambda_M (mu_M + B_M^T x_u)`` (S, U, K) of new rows under the rows' feature link:
    ``x_u`` from ``new.row_features`` (the columns of the table the fit was given) and,
    with implicit feedback on the rows, from the new rows' own pairs."""
    if "B_M" not in src:
        raise ValueError(
            "fold_in with the rows' feature link needs the draws of B_M, which this fit does not hold"
        )
    B = np.asarray(src["B_M"], np.float64).reshape(S, -1, K)
    Xs = new_row_features(prior, new, B.shape[1])
    Lam = np.asarray(src["Lambda_M"], np.float64).reshape(S, K, K)
    mu = np.asarray(src["mu_M"], np.float64).reshape(S, K)
    mean = mu[:, None, :] + np.stack([Xs @ B[s] for s in range(S)])
    return Lam, np.einsum("sul,skl->suk", mean, Lam)


def _linked_bias_mean(biases, new, src, S: int):
    """Per draw, the prior means ``x_u^T w`` (S, U) of the new rows' biases when the row
    biases have features (None otherwise): ``x_u`` as the factor link's
    (:func:`new_row_features` of the biases' specification)."""
    if "rows" not in biases.linked_sides:
        return None
    if "row_bias_w" not in src:
        raise ValueError(
            "fold_in with feature-driven row biases needs the draws of row_bias_w, which this "
            "fit does not hold (they are kept with the factor draws)"
        )
    w = np.asarray(src["row_bias_w"], np.float64).reshape(S, -1)
    Xs = new_row_features(biases, new, w.shape[1])
    return np.stack([Xs @ w[s] for s in range(S)])


def new_row_features(prior, new, num_features: int):
    """The rows' link features of new rows (scipy CSR, U x F): ``new.row_features`` when
    the prior (or the biases: any component with ``row_features`` and ``implicit``) links
    explicit features, then the implicit feedback of the new rows' pairs."""
    from ...priors import macau

    spec = prior.row_features
    if spec is not None and new.row_features is None:
        raise ValueError(
            f"fold_in: the fit's {'biases' if prior.name == 'biases' else 'prior'} links the rows "
            "to their features, so the new rows need theirs: "
            "pass RatingData(..., row_features=...) with the columns of the training table "
            "(bmczoo.data.Features.reindex aligns a table to another's columns)"
        )
    X = macau.side_features(None if spec is None else True, prior.implicit, new, "rows")
    if X.n_features != num_features:
        raise ValueError(
            f"fold_in: the new rows have {X.n_features} features, the fit's row link has {num_features} "
            "(the new rows' feature table must have the training table's columns)"
        )
    return X.to_scipy()
