"""Deterministic eigenvector signs: the one sign rule of the package (ARCHITECTURE.md conventions).

An eigenvector is defined up to its sign; every solver (through :func:`spectral.eigen._result.finalize`)
and every estimator that post-processes vectors (divides by ``sqrt(degrees)``, scales by ``T``, ...)
fixes it with :func:`sign_flip`, scikit-learn's ``_deterministic_vector_sign_flip`` rule applied to
columns: the largest-|.| entry of each column is made positive.
"""

from __future__ import annotations

import numpy as np


def sign_flip(vectors: np.ndarray) -> np.ndarray:
    """Make the largest-|.| entry of every column positive: ``(n, k) -> (n, k)`` (a new array).

    Ties in |.| go to the first (smallest row index) entry, as ``np.argmax``; an all-zero column is kept.
    """
    idx = np.argmax(np.abs(vectors), axis=0)
    signs = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return vectors * signs
