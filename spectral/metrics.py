"""Evaluation helpers: 1-NN accuracy in an embedding, trustworthiness, subspace angles, kNN recall."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.linalg import subspace_angles
from sklearn.manifold import trustworthiness
from sklearn.neighbors import KNeighborsClassifier

from eigenflow.spectral.errors import InputDataError

__all__ = ["one_nn_accuracy", "trustworthiness", "max_subspace_angle", "knn_recall"]


def one_nn_accuracy(Z_train: Any, y_train: Any, Z_test: Any, y_test: Any) -> float:
    """Accuracy of a 1-nearest-neighbour classifier trained on ``(Z_train (n, d), y_train (n,))`` and
    evaluated on ``(Z_test (m, d), y_test (m,))``: the evaluation of CK08 Sect. 5 and OV19."""
    Z_train, Z_test = np.asarray(Z_train, dtype=np.float64), np.asarray(Z_test, dtype=np.float64)
    y_train, y_test = np.asarray(y_train), np.asarray(y_test)
    if Z_train.ndim != 2 or Z_test.ndim != 2 or Z_train.shape[1] != Z_test.shape[1]:
        raise InputDataError(
            f"Z_train and Z_test must be 2-D with the same number of columns; got {Z_train.shape} and {Z_test.shape}"
        )
    if y_train.shape != (Z_train.shape[0],) or y_test.shape != (Z_test.shape[0],):
        raise InputDataError(
            f"labels must match the rows: y_train {y_train.shape} for Z_train {Z_train.shape}, "
            f"y_test {y_test.shape} for Z_test {Z_test.shape}"
        )
    clf = KNeighborsClassifier(n_neighbors=1).fit(Z_train, y_train)
    return float(np.mean(clf.predict(Z_test) == y_test))


def max_subspace_angle(A: Any, B: Any) -> float:
    """Largest principal angle (radians) between the column spaces of ``A (n, k)`` and ``B (n, k')``.

    Sign- and rotation-invariant comparison of eigenvector blocks (scipy.linalg.subspace_angles).
    """
    return float(np.max(subspace_angles(np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64))))


def knn_recall(indices: Any, reference: Any) -> float:
    """Mean fraction of the reference neighbours ``reference (n, k)`` found in ``indices (n, k')``."""
    idx, ref = np.asarray(indices), np.asarray(reference)
    if idx.shape[0] != ref.shape[0]:
        raise InputDataError(f"indices and reference must have the same rows; got {idx.shape} and {ref.shape}")
    hits = sum(np.intersect1d(a, b).size for a, b in zip(idx, ref))
    return hits / ref.size
