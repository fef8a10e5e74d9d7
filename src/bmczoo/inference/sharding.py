"""Sharding the Gibbs sweep over several devices with JAX's own engine.

The rows of ``M`` and the ratings grouped by row are split into ``D`` contiguous blocks,
one per device of a one-axis :class:`jax.sharding.Mesh`; likewise the rows of ``N`` and
the ratings grouped by column.  In a sweep (``jax.shard_map``) each device all-gathers
the other factor, builds and factorises the precisions of its own rows, and draws them;
``S_h`` is a ``psum``; ``gamma`` is drawn once, replicated.  The standard normals of every
row are generated from the same keys as on one device, so a sharded run reproduces a
single-device run draw for draw up to the rounding of the ``psum`` (exactly, in practice,
for the factors).  The same code runs on several GPUs, or several hosts after
``jax.distributed.initialize()``: there every process holds the same data and builds the
blocks of its own devices (:func:`put`), and what a fit returns is all-gathered
(:func:`to_host`), so that every process has all of it.

Each block has ``ceil(m / D)`` rows; the padding rows have no ratings and a zero normal
draw, so they stay exactly zero and add nothing to ``S``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..linalg import CSR, resolve_hot_path, row_ids_from_indptr

__all__ = [
    "AXIS",
    "make_mesh",
    "padded_size",
    "shard_csr",
    "shard_csr_columns",
    "shard_links",
    "link_specs",
    "local_links",
    "replicated",
    "row_sharded",
    "put",
    "to_host",
    "Comm",
    "LOCAL",
    "sharded_comm",
]

#: name of the mesh axis over which rows are sharded
AXIS = "rows"


def make_mesh(devices) -> Mesh:
    """A one-axis mesh over ``devices`` (a non-empty sequence of distinct JAX devices)."""
    if isinstance(devices, Mesh):
        if devices.axis_names != (AXIS,):
            raise ValueError(
                f"devices: a Mesh must have the single axis {AXIS!r}, got {devices.axis_names}"
            )
        return devices
    try:
        devs = list(devices)
    except TypeError:
        raise ValueError(f"devices must be a sequence of jax devices, got {devices!r}") from None
    if not devs:
        raise ValueError("devices must not be empty")
    for d in devs:
        if not isinstance(d, jax.Device):
            raise ValueError(f"devices must be jax devices (e.g. jax.devices()), got {d!r}")
    if len({d.id for d in devs}) != len(devs):
        raise ValueError("devices contains the same device more than once")
    return Mesh(np.array(devs), (AXIS,))


def padded_size(m: int, num_shards: int) -> int:
    """``m`` rounded up to a multiple of ``num_shards``."""
    return -(-m // num_shards) * num_shards


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def row_sharded(mesh: Mesh) -> NamedSharding:
    """Sharding of (C, m_pad, K) factor arrays: rows split over the mesh axis."""
    return NamedSharding(mesh, P(None, AXIS, None))


def put(x, sharding: NamedSharding) -> jax.Array:
    """``jax.device_put(x, sharding)``; when the mesh spans devices of several processes
    (after ``jax.distributed.initialize``), each process builds its own shards from ``x``
    (host data, or an array of one of its devices), which must hold the same value on every
    process: there is no transfer between processes (``device_put`` refuses committed
    arrays there and compares numpy inputs across processes)."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(
            put(jax.random.key_data(x), sharding), impl=jax.random.key_impl(x)
        )
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def to_host(x) -> np.ndarray:
    """``np.asarray(x)``; an array sharded over the devices of several processes is first
    all-gathered, so that every process gets all of it (all processes must call this)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def shard_csr(
    view,
    shape: tuple[int, int],
    dtype,
    mesh: Mesh,
    hot_path: str | None = None,
    pad_other: bool = True,
) -> CSR:
    """Per-device CSR blocks of the ``m x m_other`` rating pattern ``view``.

    Arrays get a leading device axis (sharded over the mesh): ``indptr`` (D, b+1) local
    to the block of ``b = ceil(m / D)`` rows, ``index`` / ``values`` / ``ones`` (D, nnz_max)
    padded after the block's last entry (ignored by the CSR product; their ``row_ids``
    are ``b``, out of range, so the segment sums drop them too).  The column indices
    refer to the all-gathered other factor (``m_other`` padded to a multiple of D rows).

    Parameters
    ----------
    view : bmczoo.data.SortedView
        The rows' (or columns') sorted view of the ratings.
    shape : tuple of int
        ``(m, m_other)``.
    dtype : dtype
        Dtype of the values.
    mesh : jax.sharding.Mesh
        The one-axis device mesh.
    hot_path : {"auto", "bcsr", "segment"}, optional
        As in :func:`bmczoo.linalg.csr_from_view` (``"auto"`` is resolved by
        the platform of the mesh's devices).
    pad_other : bool
        Whether the column indices refer to a padded, all-gathered factor (the ratings);
        False: to ``m_other`` columns as they are (a feature table's features).
    """
    D = mesh.devices.size
    m, m_other = shape
    b = padded_size(m, D) // D
    indptr = np.asarray(view.indptr, np.int64)
    bounds = [(min(d * b, m), min((d + 1) * b, m)) for d in range(D)]
    nnz = [int(indptr[hi] - indptr[lo]) for lo, hi in bounds]
    width = max(max(nnz), 1)
    ip = np.zeros((D, b + 1), np.int32)
    ix = np.zeros((D, width), np.int32)
    vals = np.zeros((D, width), np.dtype(dtype))
    ones = np.zeros((D, width), np.dtype(dtype))
    rid = np.full((D, width), b, np.int32)
    for d, (lo, hi) in enumerate(bounds):
        start = indptr[lo]
        local = indptr[lo : hi + 1] - start
        ip[d, : hi - lo + 1] = local
        ip[d, hi - lo + 1 :] = local[-1]  # padding rows: empty
        k = nnz[d]
        ix[d, :k] = view.index[start : start + k]
        vals[d, :k] = view.values[start : start + k]
        ones[d, :k] = 1
        rid[d, :k] = row_ids_from_indptr(local)
    sharding = NamedSharding(mesh, P(AXIS))
    path = resolve_hot_path(hot_path, mesh.devices.flat[0].platform)
    return CSR(
        *(put(x, sharding) for x in (ip, ix, vals, ones)),
        (b, padded_size(m_other, D) if pad_other else m_other),
        put(rid, sharding),
        path,
    )


def local_csr(block: CSR) -> CSR:
    """Inside ``shard_map``: the device's own block (drop the leading axis of size 1)."""
    rid = None if block.row_ids is None else block.row_ids[0]
    return CSR(
        block.indptr[0],
        block.index[0],
        block.values[0],
        block.ones[0],
        block.shape,
        rid,
        block.hot_path,
    )


def shard_csr_columns(csr: CSR, mesh: Mesh) -> CSR:
    """Per-device blocks of the sparse ``F x m`` matrix ``csr`` split by its columns (the
    transpose of a feature table: device ``d`` holds columns ``d b .. (d + 1) b - 1``, ``b =
    ceil(m / D)``, as a ``F x b`` CSR with local column indices), for the products
    ``csr[:, block] @ F_block`` of each device's rows ``F_block`` (b, W).

    Arrays get a leading device axis as in :func:`shard_csr`: ``indptr`` (D, F+1),
    ``index`` / ``values`` / ``ones`` / ``row_ids`` (D, nnz_max) padded after the block's
    last entry (row id ``F``: dropped)."""
    D = mesh.devices.size
    F, m = csr.shape
    b = padded_size(m, D) // D
    indptr = np.asarray(csr.indptr, np.int64)
    index = np.asarray(csr.index, np.int64)
    values = np.asarray(csr.values)
    rows = row_ids_from_indptr(indptr)
    block = index // b  # the device of each entry (entries stay in row order within it)
    nnz = np.bincount(block, minlength=D)
    width = max(int(nnz.max(initial=0)), 1)
    ip = np.zeros((D, F + 1), np.int32)
    ix = np.zeros((D, width), np.int32)
    vals = np.zeros((D, width), values.dtype)
    ones = np.zeros((D, width), values.dtype)
    rid = np.full((D, width), F, np.int32)
    for d in range(D):
        sel = block == d
        k = int(nnz[d])
        np.cumsum(np.bincount(rows[sel], minlength=F), out=ip[d, 1:])
        ix[d, :k] = index[sel] - d * b
        vals[d, :k] = values[sel]
        ones[d, :k] = 1
        rid[d, :k] = rows[sel]
    sharding = NamedSharding(mesh, P(AXIS))
    path = resolve_hot_path(csr.hot_path, mesh.devices.flat[0].platform)
    return CSR(*(put(x, sharding) for x in (ip, ix, vals, ones)), (F, b), put(rid, sharding), path)


def shard_links(links: dict, layout: dict[str, str], mesh: Mesh) -> dict:
    """A prior's feature-link arrays over the mesh by ``layout`` (key -> ``"rows"``,
    ``"cols"`` or ``"replicated"``; :func:`bmczoo.priors.macau.sharded.link_layout`): a
    sparse matrix by rows in per-device blocks (:func:`shard_csr`, column indices not
    padded), a sparse matrix by columns (:func:`shard_csr_columns`), a dense array by rows
    zero-padded to a multiple of the device count and row-sharded (padding rows add
    nothing to a product over rows), the rest replicated."""
    D = mesh.devices.size
    out = {}
    for key, x in links.items():
        kind = layout[key]
        if kind == "replicated":
            out[key] = put(x, replicated(mesh))
        elif isinstance(x, CSR) and kind == "rows":
            view = SimpleNamespace(
                indptr=np.asarray(x.indptr), index=np.asarray(x.index), values=np.asarray(x.values)
            )
            out[key] = shard_csr(view, x.shape, x.values.dtype, mesh, x.hot_path, pad_other=False)
        elif isinstance(x, CSR):
            out[key] = shard_csr_columns(x, mesh)
        else:
            x = np.asarray(x)
            x = np.pad(x, [(0, padded_size(x.shape[0], D) - x.shape[0])] + [(0, 0)] * (x.ndim - 1))
            out[key] = put(x, NamedSharding(mesh, P(AXIS)))
    return out


def link_specs(links: dict, layout: dict[str, str]) -> dict:
    """The ``shard_map`` specs of :func:`shard_links`' arrays: split ones by the device
    axis (a sparse block's arrays by their leading axis), replicated ones whole."""
    return {k: P() if layout[k] == "replicated" else P(AXIS) for k in links}


def move_draw_specs(draws: dict) -> dict:
    """Partition specs of one side's column-move draws (``columns._move_draws``): the
    per-row normals ``z``, ``z2`` (C, K, rows) split by rows, as the rows' own normals;
    the per-column numbers replicated."""
    return {name: P(None, None, AXIS) if name in ("z", "z2") else P() for name in draws}


def local_links(links: dict) -> dict:
    """Inside ``shard_map``: the device's own link arrays (a sparse block without its
    leading axis, :func:`local_csr`; the others as they are)."""
    return {k: local_csr(v) if isinstance(v, CSR) else v for k, v in links.items()}


def pad_rows(x: jax.Array, m_pad: int) -> jax.Array:
    """Zero-pad the row axis (1) of a (C, m, K) array to ``m_pad`` rows."""
    return jnp.pad(x, ((0, 0), (0, m_pad - x.shape[1]), (0, 0)))


class Comm(NamedTuple):
    """How a sweep or VB body sees the other rows: ``gather`` all rows of a factor, ``psum``
    over devices, ``mask(x, which)`` zeroes the padding rows (axis 1) of factor ``which``
    (0: M, 1: N); on one device there is no padding and the three are the identity
    (:data:`LOCAL`).  The Gibbs sweep and VB run the same body serially and sharded."""

    gather: Callable
    psum: Callable
    mask: Callable


LOCAL = Comm(gather=lambda x: x, psum=lambda x: x, mask=lambda x, which: x)


def sharded_comm(dims: tuple[int, int]) -> Comm:
    """Inside ``shard_map``: all-gather the rows of a factor, psum over the devices, and
    zero the padding rows of this device's block of factor ``which`` (true sizes ``dims``)."""

    def mask(x, which):
        b = x.shape[1]
        start = jax.lax.axis_index(AXIS) * b
        valid = ((start + jnp.arange(b)) < dims[which]).astype(x.dtype)
        return x * valid.reshape((1, b) + (1,) * (x.ndim - 2))

    return Comm(
        gather=lambda x: jax.lax.all_gather(x, AXIS, axis=1, tiled=True),
        psum=lambda x: jax.lax.psum(x, AXIS),
        mask=mask,
    )
