"""Tall-skinny QR over the row parts of a distributed block (the start blocks and the fallback of
:mod:`._sharded_lobpcg`), and the gather of such a block into the driver."""

from __future__ import annotations

import numpy as np

from eigenflow.spectral.eigen import _sharded_ops
from eigenflow.spectral.placement import item


def orthonormal(client, parts: list, workers: list, *, columns=None, select=None) -> tuple[list, np.ndarray]:
    """Tall-skinny QR over row blocks: ``A = Q R`` for ``A`` held as row parts (futures of (n_i, b), in row
    order, on ``workers``; or a list of such lists, placed side by side: ``A = [A_1, A_2, ...]``).

    TSQR with a flat reduction tree (Demmel, Grigori, Hoemmen & Langou 2012; dask.array's ``tsqr`` with one
    level): ``A_i = Q_i R_i`` on each worker, the ``(P b, b)`` stack of the ``R_i`` factorized in the driver,
    ``[R_1; ...; R_P] = [Q'_1; ...; Q'_P] R``, and ``Q = [Q_1 Q'_1; ...]`` formed on the workers. Only the
    ``(b, b)`` factors pass through the driver. dask.array's ``tsqr`` computes the same with a task graph built
    per call, whose overhead a solve pays at every iteration, and it does not keep ``Q_i`` on ``A_i``'s
    worker.

    ``columns`` (indices): factorize ``A[:, columns]`` (selected on the workers). ``select(R) -> indices``: form
    only those columns of ``Q`` (e.g. to drop rank-deficient ones). Returns ``(Q parts (futures of
    (n_i, q) on the same workers), R (b, b))``.
    """
    stacks = [parts] if parts and not isinstance(parts[0], list) else list(parts)
    pairs = [client.submit(_sharded_ops.local_qr, list(blocks), columns, workers=[w], pure=False)
             for w, *blocks in zip(workers, *stacks)]
    factors = client.gather([client.submit(item, q, 1, workers=[w], pure=False)
                             for q, w in zip(pairs, workers)])
    Q2, R = np.linalg.qr(np.vstack(factors))
    if select is not None:
        Q2 = Q2[:, select(R)]
    cuts = np.cumsum([f.shape[0] for f in factors])[:-1]
    return [client.submit(_sharded_ops.combine_qr, q, piece, workers=[w], pure=False)
            for q, piece, w in zip(pairs, np.split(Q2, cuts), workers)], R


def gather_rows(client, parts: list) -> np.ndarray:
    """The ``(n, b)`` block of row parts, gathered in the driver (for a caller that needs it whole)."""
    return np.vstack(client.gather(list(parts)))
