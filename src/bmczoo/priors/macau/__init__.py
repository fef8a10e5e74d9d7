"""The Macau feature link of the Normal-Wishart row prior (Simm et al. 2017; docs/algorithms.md,
"Feature links (side information)"): rows ``M_i ~ N(mu + B^T x_i, Lambda^{-1})`` with
``x_i`` the row's features (side information, implicit feedback or both), ``B`` (F x K)
matrix normal with rows ``B_f ~ N(0, (lam_B Lambda)^{-1})`` and ``lam_B ~ Gamma(a_B, b_B)``.

The pieces here are used by :class:`~bmczoo.priors.NormalWishart` when it is given
``row_features=`` / ``col_features=`` / ``implicit=``:

* :func:`side_features` turns the prior's specification into a
  :class:`~bmczoo.data.Features` table for one side of the data;
* :func:`link_arrays` prepares its device arrays once: ``X`` and ``X^T`` as sparse
  matrices of the Gibbs hot path (``X B`` and ``X^T M`` in O(nnz K)) and the
  eigendecomposition ``X^T X = V diag(d) V^T`` (float64 on the host), so that ``A = X^T X +
  lam_B I`` is diagonal in the basis ``V`` whatever ``lam_B`` is: no factorisation per sweep
  (for many more features than rows, from ``X X^T`` instead, without ``V``: :mod:`.eigen`);
* :func:`link_block` draws ``B``, then ``lam_B``, then ``(mu, Lambda)`` given the rows
  (one chain), each from its exact conditional.

The package is laid out by role: :mod:`.features` (the prior's specification and a side's
feature table), :mod:`.eigen` (the decomposition, on the features or on the rows, and its
size guard), :mod:`.arrays` (the device arrays and the products with them),
:mod:`.algebra` (what Gibbs and VB share), :mod:`.gibbs` (the exact conditional draws) and
:mod:`.vb` (the mean-field updates, the ELBO part and :class:`VBLink`).
"""

from .algebra import LinkHyper, LinkRows
from .arrays import (
    coords_mean,
    coords_stats,
    link_arrays,
    shared_link_arrays,
    links_of,
    stored_links,
    x_times,
    xt_times,
)
from .features import FeatureTable, check_implicit, check_spec, side_features
from .gibbs import LinkChain, b_draw, lam_conditional, link_block, nw_link_conditional
from .vb import (
    GammaQ,
    LinkQ,
    NormalWishartQ,
    VBLink,
    unlinked,
    vb_b_update,
    vb_lam_update,
    vb_link_elbo_term,
    vb_nw_link_update,
    vb_residual_stats,
)

__all__ = [
    "FeatureTable",
    "check_spec",
    "check_implicit",
    "side_features",
    "link_arrays",
    "shared_link_arrays",
    "coords_mean",
    "coords_stats",
    "stored_links",
    "links_of",
    "x_times",
    "xt_times",
    "LinkRows",
    "LinkHyper",
    "LinkChain",
    "b_draw",
    "lam_conditional",
    "nw_link_conditional",
    "link_block",
    "LinkQ",
    "NormalWishartQ",
    "GammaQ",
    "vb_b_update",
    "vb_lam_update",
    "vb_residual_stats",
    "vb_nw_link_update",
    "vb_link_elbo_term",
    "unlinked",
    "VBLink",
]
