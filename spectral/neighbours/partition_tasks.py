"""The per-block tasks of the row partition (:mod:`spectral.neighbours.partition`): each takes one row block of X (m, d)
with its rows' part labels and returns small results (moments, sums, products, histograms, counts) or per-row
arrays that stay where the block lives (projections, labels). :func:`~spectral.neighbours.partition.bisection_blocks`
drives them over the blocks.
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.errors import InputDataError

#: Rows of a block converted to float64 at a time by :func:`block_moments`, :func:`block_projections` and
#: :meth:`~spectral.neighbours.partition.Split.projections` (their scratch: ``SLICE_ROWS x d`` x 8 bytes, 32 MB at d =
#: 1024, whereas converting a whole chunk, then centring it, would make two float64 copies of the chunk).
SLICE_ROWS = 4096


def _labels_of(labels, m: int) -> np.ndarray:
    """``(m,)`` part labels of a block's rows (None: all in part 0)."""
    return np.zeros(m, dtype=np.int64) if labels is None else np.asarray(labels, dtype=np.int64)


def block_moments(block: np.ndarray, labels, n_labels: int, start: int = 0):
    """Per-part moments of a row block, read :data:`SLICE_ROWS` rows at a time (two passes: sums, then the
    centred products), so the float64 scratch is ``SLICE_ROWS x d`` whatever the block's size.

    Parameters
    ----------
    block : ndarray, shape (m, d)
        Rows ``start .. start + m - 1`` of X (checked finite; an error names the first bad global row).
    labels : ndarray of int, shape (m,), or None
        Part of each row, in ``[0, n_labels)`` (None: all in part 0).

    Returns
    -------
    counts : ndarray of int64, shape (c,)
    means : ndarray of float64, shape (c, d)
    scatter : ndarray of float64, shape (c, d, d)
        ``sum_i (x_i - mean)(x_i - mean)^T`` over the part's rows of the block.
    """
    block = np.asarray(block)
    m, d = block.shape
    counts, means = block_sums(block, labels, n_labels, start)
    labels = _labels_of(labels, m)
    present = np.flatnonzero(counts)
    means[present] /= counts[present, None]
    scatter = np.zeros((n_labels, d, d))
    for a in range(0, m, SLICE_ROWS):
        Y = np.asarray(block[a:a + SLICE_ROWS], dtype=np.float64)
        lab = labels[a:a + SLICE_ROWS]
        for c in present:
            Z = Y[lab == c] - means[c]
            scatter[c] += Z.T @ Z
    return counts, means, scatter


def block_sums(block: np.ndarray, labels, n_labels: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(counts (c,) int64, sums (c, d) float64)`` of the rows of a block per part (rows checked finite, as in
    :func:`block_moments`), read :data:`SLICE_ROWS` rows at a time."""
    block = np.asarray(block)
    m, d = block.shape
    labels = _labels_of(labels, m)
    counts = np.bincount(labels, minlength=n_labels).astype(np.int64)
    sums = np.zeros((n_labels, d))
    for a in range(0, m, SLICE_ROWS):
        Y = np.asarray(block[a:a + SLICE_ROWS], dtype=np.float64)
        finite = np.isfinite(Y).all(axis=1)
        if not finite.all():
            raise InputDataError(f"X must be finite; row {start + a + int(np.flatnonzero(~finite)[0])} holds NaN "
                                 "or infinity")
        lab = labels[a:a + SLICE_ROWS]
        for c in np.flatnonzero(counts):
            sums[c] += Y[lab == c].sum(axis=0)
    return counts, sums


def block_scatter_products(block: np.ndarray, labels, means: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``(c, d)``: row ``i`` is ``sum_j (x_j - means[i]) ((x_j - means[i]) . V[i])`` over the block's rows ``x_j``
    of part ``i``, the block's share of ``C_i V[i]`` (one power-iteration step without forming ``C_i``:
    ``O(m d)`` per part instead of ``O(m d^2)``).

    Computed as ``Y^T w - mean sum(w)`` with ``w = Y V[i] - mean . V[i]``, two matrix-vector products on the
    rows ``Y`` as stored (no float64 or centred copy of the block: those made the rounds memory-bound), in the
    block's floating dtype (float32 X: float32 products, accumulated in float64). A direction to cut along
    needs no more precision than that; the projections and cuts are computed in float64
    (:func:`block_projections`)."""
    block = np.asarray(block)
    if block.dtype not in (np.float32, np.float64):
        block = block.astype(np.float64)
    labels = _labels_of(labels, block.shape[0])
    out = np.zeros(V.shape, dtype=np.float64)
    for c in np.flatnonzero(np.bincount(labels, minlength=V.shape[0])):
        Y = block if labels.size and (labels == c).all() else block[labels == c]
        v = V[c].astype(block.dtype)
        w = (Y @ v).astype(np.float64) - means[c] @ V[c]
        out[c] = (w.astype(block.dtype) @ Y).astype(np.float64) - means[c] * w.sum()
    return out


def combine_moments(moments: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Moments of the union of blocks from :func:`block_moments` results (Chan, Golub & LeVeque's pairwise
    update: ``S = S_a + S_b + n_a n_b / n (mean_a - mean_b)(mean_a - mean_b)^T``)."""
    counts, means, scatter = (np.array(a, dtype=np.float64) for a in moments[0])
    for cb, mb, sb in moments[1:]:
        total = counts + cb
        safe = np.maximum(total, 1)
        delta = mb - means
        scatter = scatter + sb + (counts * cb / safe)[:, None, None] * delta[:, :, None] * delta[:, None, :]
        means = means + delta * (cb / safe)[:, None]
        counts = total
    return counts.astype(np.int64), means, scatter


def block_projections(block: np.ndarray, labels, means: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """``(m,)``: ``(x_i - means[l_i]) . directions[l_i]`` for the rows ``x_i`` (m, d) of a block with labels ``l_i``
    (``means``, ``directions`` (c, d))."""
    labels = _labels_of(labels, block.shape[0])
    out = np.empty(block.shape[0])
    for a in range(0, block.shape[0], SLICE_ROWS):
        Y, lab = np.asarray(block[a:a + SLICE_ROWS], dtype=np.float64), labels[a:a + SLICE_ROWS]
        out[a:a + SLICE_ROWS] = np.einsum("ij,ij->i", Y - means[lab], directions[lab])
    return out


def block_part_ranges(block, proj: np.ndarray, labels, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """``(minima, maxima)`` (c,) of the projections of each part's rows in the block (inf / -inf: none)."""
    labels = _labels_of(labels, proj.size)
    lo, hi = np.full(n_labels, np.inf), np.full(n_labels, -np.inf)
    np.minimum.at(lo, labels, proj)
    np.maximum.at(hi, labels, proj)
    return lo, hi


def _bin_index(v: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Bin of each value of ``v`` in ``[lo, hi]`` cut into ``bins`` equal bins: monotone non-decreasing in the
    value (every step is), so a bin's rows are exactly those between its smallest and largest value."""
    if not hi > lo:
        return np.zeros(v.size, dtype=np.int64)
    return np.clip(((v - lo) / (hi - lo) * bins).astype(np.int64), 0, bins - 1)


def block_histograms(block, proj: np.ndarray, labels, parts: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For part ``parts[t]``, the histogram of its rows' projections inside ``[lo[t], hi[t]]``: ``counts``,
    ``minima``, ``maxima``, each (len(parts), bins) (inf / -inf in empty bins)."""
    labels = _labels_of(labels, proj.size)
    counts = np.zeros((parts.size, bins), dtype=np.int64)
    mins, maxs = np.full((parts.size, bins), np.inf), np.full((parts.size, bins), -np.inf)
    for t, i in enumerate(parts):
        v = proj[labels == i]
        v = v[(v >= lo[t]) & (v <= hi[t])]
        b = _bin_index(v, lo[t], hi[t], bins)
        counts[t] = np.bincount(b, minlength=bins)
        np.minimum.at(mins[t], b, v)
        np.maximum.at(maxs[t], b, v)
    return counts, mins, maxs


def block_interval_rows(block, proj: np.ndarray, labels, parts: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                        start: int) -> list:
    """For part ``parts[t]``, ``(projections, global rows)`` of its rows with a projection in ``[lo[t], hi[t]]``."""
    labels = _labels_of(labels, proj.size)
    out = []
    for t, i in enumerate(parts):
        sel = np.flatnonzero((labels == i) & (proj >= lo[t]) & (proj <= hi[t]))
        out.append((proj[sel], start + sel))
    return out


def block_tie_rows(block, proj: np.ndarray, labels, requests: list, start: int) -> dict:
    """``{part: global row}``: for each request ``(part, value, m)``, the ``m``-th (0-based, in row order) row of
    the block in ``part`` whose projection equals ``value``."""
    labels = _labels_of(labels, proj.size)
    return {part: start + int(np.flatnonzero((labels == part) & (proj == value))[m]) for part, value, m in requests}


def _goes_left(proj: np.ndarray, labels: np.ndarray, value: np.ndarray, row: np.ndarray, start: int) -> np.ndarray:
    """``(m,)`` bool: the row's ``(projection, global row)`` is at most its part's ``(value, row)``."""
    rows = start + np.arange(proj.size)
    v = value[labels]
    return (proj < v) | ((proj == v) & (rows <= row[labels]))


def block_right_min(block, proj: np.ndarray, labels, value: np.ndarray, row: np.ndarray, start: int) -> np.ndarray:
    """``(c,)`` smallest projection of each part's rows that go right of its cut (inf: none)."""
    labels = _labels_of(labels, proj.size)
    right = ~_goes_left(proj, labels, value, row, start)
    out = np.full(value.size, np.inf)
    np.minimum.at(out, labels[right], proj[right])
    return out


def block_assign(block, proj: np.ndarray, labels, value: np.ndarray, row: np.ndarray, left: np.ndarray,
                 right: np.ndarray, start: int) -> np.ndarray:
    """``(m,)`` int32: the rows' labels at the next level (part ``i`` sends its rows ``<= (value[i], row[i])`` to
    ``left[i]``, the others to ``right[i]``)."""
    labels = _labels_of(labels, proj.size)
    return np.where(_goes_left(proj, labels, value, row, start), left[labels], right[labels]).astype(np.int32)


def block_part_counts(block, labels, n_parts: int) -> np.ndarray:
    """``(P,)`` rows of the block in each part."""
    return np.bincount(_labels_of(labels, np.asarray(block).shape[0]), minlength=n_parts).astype(np.int64)
