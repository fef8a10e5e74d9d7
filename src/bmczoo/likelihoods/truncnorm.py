# TEMPORARY placeholder (replaced by the tn16 branch)
import jax, jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr, ndtri

def log_mass(a, b):
    a, b = jnp.broadcast_arrays(a, b)
    flip = a > 0
    a2 = jnp.where(flip, -b, a); b2 = jnp.where(flip, -a, b)
    la, lb = log_ndtr(a2), log_ndtr(b2)
    return lb + jnp.log1p(-jnp.exp(la - lb))

def sample(key, mean, lo, hi, dtype=None):
    mean = jnp.asarray(mean)
    u = jax.random.uniform(key, jnp.broadcast_shapes(mean.shape, jnp.shape(lo), jnp.shape(hi)), mean.dtype, 1e-7, 1 - 1e-7)
    a, b = lo - mean, hi - mean
    flip = a > 0
    a2 = jnp.where(flip, -b, a); b2 = jnp.where(flip, -a, b)
    pa, pb = ndtr(a2), ndtr(b2)
    x = ndtri(pa + u * (pb - pa))
    x = jnp.where(flip, -x, x)
    return mean + jnp.clip(x, a, b)

def moments(mean, lo, hi):
    from jax.scipy.stats import norm
    a, b = lo - mean, hi - mean
    Z = jnp.exp(log_mass(a, b))
    pa, pb = norm.pdf(a), norm.pdf(b)
    m = (pa - pb) / Z
    ta = jnp.where(jnp.isfinite(a), a * pa, 0.0); tb = jnp.where(jnp.isfinite(b), b * pb, 0.0)
    v = 1 + (ta - tb) / Z - m * m
    return mean + m, v
