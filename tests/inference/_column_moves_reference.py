"""The column moves as first written (per rating: a residual over every rating, updated
column by column, and segment sums), kept as the reference that the Gram-based
:func:`bmczoo.inference.gibbs.columns._column_side` must reproduce (same random numbers, float64).
O(n K) passes over the ratings per column; slow, but each line is the textbook formula."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from bmczoo.inference.gibbs import columns as cm
from bmczoo.inference.gibbs.columns import _householder, column_log_marginal


def column_side(
    csr, own, other, bias_own, bias_other, gamma, tb, keys, prior, d: int, use_bias: bool, values
):
    """The column moves with ``own`` (C, m, K) integrated out and ``other`` (C, m_other, K)
    rescaled, the ratings grouped by the rows of ``own`` (``csr``).  Returns the new
    ``own``, ``other``, ``gamma``."""
    C, m, K = own.shape
    m_other = other.shape[1]
    n = csr.index.shape[0]
    dt = own.dtype
    rid = jnp.repeat(jnp.arange(m, dtype=jnp.int32), jnp.diff(csr.indptr), total_repeat_length=n)
    cid = csr.index
    e = values - jnp.einsum("cnk,cnk->cn", own[:, rid], other[:, cid])
    if use_bias:
        e = e - bias_own[:, rid] - bias_other[:, cid]
    kk = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    z = jax.vmap(lambda k: jax.random.normal(k, (K, m), dt))(kk[:, 0])
    zq = jax.vmap(lambda k: jax.random.normal(k, (K,), dt))(kk[:, 1])
    log_u = jnp.log(jax.vmap(lambda k: jax.random.uniform(k, (K,), dt))(kk[:, 2]))

    def segsum(x):  # (C, n) -> (C, m): sums over each row's ratings
        return jax.ops.segment_sum(x.T, rid, num_segments=m, indices_are_sorted=True).T

    def body(h, carry):
        own, other, gamma, e = carry
        a, f, g = own[:, :, h], other[:, :, h], gamma[:, h]
        fk = f[:, cid]
        w = e + a[:, rid] * fk  # the residual without column h
        A, B = segsum(fk * fk), segsum(w * fk)
        g2, log_s, log_r = prior.column_proposal(g, zq[:, h], d)
        s = jnp.exp(log_s)
        ff = jnp.sum(f * f, axis=-1)
        # prior of the rescaled column and the Jacobian m_other log s (they cancel for
        # s = sqrt(g2/g); kept general for proposals that rescale otherwise)
        log_f = (
            -0.5 * m_other * (jnp.log(g2) - jnp.log(g))
            - 0.5 * ff * (s * s / g2 - 1.0 / g)
            + cm._log_jacobian(m_other, log_s)
        )
        log_alpha = (
            log_r
            + log_f
            + column_log_marginal(g2, (s * s)[:, None] * A, s[:, None] * B, tb)
            - column_log_marginal(g, A, B, tb)
        )
        accept = log_u[:, h] < log_alpha
        g_new = jnp.where(accept, g2, g)
        s_eff = jnp.where(accept, s, jnp.ones_like(s))
        f_new = s_eff[:, None] * f
        p = 1.0 / g_new[:, None] + tb[:, None] * (s_eff * s_eff)[:, None] * A
        a_new = tb[:, None] * s_eff[:, None] * B / p + z[:, h] * lax.rsqrt(p)
        e = w - a_new[:, rid] * f_new[:, cid]
        return (
            own.at[:, :, h].set(a_new),
            other.at[:, :, h].set(f_new),
            gamma.at[:, h].set(g_new),
            e,
        )

    if prior.column_block(gamma) is not None:
        # the reflected flip (see _reflected_flip); its extra draws from a folded key: the
        # other priors' moves draw as before
        kr = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 1), 2))(keys)
        xi = jax.vmap(lambda k: jax.random.normal(k, (K, K), dt))(kr[:, 0])
        z2 = jax.vmap(lambda k: jax.random.normal(k, (K, m), dt))(kr[:, 1])

        def body(h, carry):  # noqa: F811 - the reflected flip replaces the plain one
            return reflected_flip(
                h,
                carry,
                rid,
                cid,
                segsum,
                prior,
                tb,
                d,
                m_other,
                z[:, h],
                z2[:, h],
                xi[:, h],
                zq[:, h],
                log_u[:, h],
            )

    own, other, gamma, _ = lax.fori_loop(0, K, body, (own, other, gamma, e))
    return own, other, gamma


def _block_direction(own, other, block):
    """Unit direction (C, K) of least energy ``x^T (own^T own + other^T other) x`` within the
    columns of ``block`` (C, K) bool (zero outside it)."""
    G = jnp.einsum("cmk,cml->ckl", own, own) + jnp.einsum("cmk,cml->ckl", other, other)
    big = jnp.trace(G, axis1=-2, axis2=-1) + 1.0  # above every eigenvalue of the block
    inside = block[:, :, None] & block[:, None, :]
    G = jnp.where(inside, G, 0.0) + jax.vmap(jnp.diag)(jnp.where(block, 0.0, big[:, None]))
    v = jnp.where(block, jnp.linalg.eigh(G)[1][:, :, 0], 0.0)
    return v / jnp.linalg.norm(v, axis=-1, keepdims=True)


def reflected_flip(
    h, carry, rid, cid, segsum, prior, tb, d: int, m_other: int, z, z2, xi, zq, log_u
):
    """:func:`bmczoo.inference.gibbs.columns._reflected_flip` (whose docstring explains the move)
    on the per-rating residual ``e`` (in the carry) instead of per-row Gram matrices."""
    own, other, gamma, e = carry
    C, m, K = own.shape
    dt = own.dtype
    slab = prior.column_block(gamma)
    block = slab | (jnp.arange(K) == h)[None]
    k = jnp.sum(block, axis=-1).astype(dt)
    off = slab[:, h]
    xi = jnp.where(block, xi, 0.0)
    v = _block_direction(own, other, block)
    aimed = (
        xi + (math.sqrt(1.0 + cm._ACG_LAMBDA) - 1.0) * jnp.sum(v * xi, axis=-1, keepdims=True) * v
    )
    w = jnp.where(off[:, None], aimed, xi)
    w = jnp.where(block, w, 0.0)
    w = w / jnp.linalg.norm(w, axis=-1, keepdims=True)
    H = _householder(h, w, K)
    reflect = lambda x: jnp.einsum("cmk,ckl->cml", x, H)  # noqa: E731
    own_b = jnp.where(off[:, None, None], reflect(own), own)
    other_b = jnp.where(off[:, None, None], reflect(other), other)

    def sums(own_x, other_x):
        a, f = own_x[:, :, h], other_x[:, :, h]
        fk = f[:, cid]
        r = e + a[:, rid] * fk  # the residual without column h (theta is unchanged by H)
        return f, r, segsum(fk * fk), segsum(r * fk)

    g = gamma[:, h]
    f, r, A, B = sums(own_b, other_b)
    g2, log_s, log_r = prior.column_proposal(g, zq, d)
    s = jnp.exp(log_s)
    ff = jnp.sum(f * f, axis=-1)
    log_f = (
        -0.5 * m_other * (jnp.log(g2) - jnp.log(g))
        - 0.5 * ff * (s * s / g2 - 1.0 / g)
        + cm._log_jacobian(m_other, log_s)
    )
    log_alpha = (
        log_r
        + log_f
        + column_log_marginal(g2, (s * s)[:, None] * A, s[:, None] * B, tb)
        - column_log_marginal(g, A, B, tb)
    )
    p = 1.0 / g2[:, None] + tb[:, None] * (s * s)[:, None] * A
    a_prop = tb[:, None] * s[:, None] * B / p + z * lax.rsqrt(p)
    f_prop = s[:, None] * f
    own_p, other_p = own_b.at[:, :, h].set(a_prop), other_b.at[:, :, h].set(f_prop)
    e_prop = r - a_prop[:, rid] * f_prop[:, cid]
    own_p = jnp.where(off[:, None, None], own_p, reflect(own_p))  # switching on: reflect last
    other_p = jnp.where(off[:, None, None], other_p, reflect(other_p))
    log_q = jnp.where(
        off,
        -cm._acg_log_density(w, v, k),
        cm._acg_log_density(w, _block_direction(own_p, other_p, block), k),
    )
    accept = log_u < log_alpha + log_q
    # rejected: the current state.  Switching on, whose acceptance does not depend on the
    # current own column h, then redraws it from its conditional (a Gibbs step); switching
    # off must not: its acceptance depends on that column through v(x), so a redraw only
    # after a rejection would not keep the posterior (measured: Geweke z = -6 for gamma_min)
    f0, r0, A0, B0 = sums(own, other)
    p0 = 1.0 / g[:, None] + tb[:, None] * A0
    a0 = tb[:, None] * B0 / p0 + z2 * lax.rsqrt(p0)
    own_r = jnp.where(off[:, None, None], own, own.at[:, :, h].set(a0))
    e_r = jnp.where(off[:, None], e, r0 - a0[:, rid] * f0[:, cid])
    acc = accept[:, None, None]
    return (
        jnp.where(acc, own_p, own_r),
        jnp.where(acc, other_p, other),
        gamma.at[:, h].set(jnp.where(accept, g2, g)),
        jnp.where(accept[:, None], e_prop, e_r),
    )
