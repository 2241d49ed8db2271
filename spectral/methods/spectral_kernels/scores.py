"""Class scores of the spectral-kernel classifiers (LQCL09): eq. 5 on training rows, their row distributions, and
the normalized propagation step ``S(x, X) F`` for new points (:mod:`.estimators`)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from eigenflow.spectral._validation import check_float
from eigenflow.spectral.errors import ParameterError


def class_matrix(V_labeled: np.ndarray, codes: np.ndarray, mu: np.ndarray, n_classes: int,
                 class_weight=None) -> np.ndarray:
    """``P = U V_l^T C`` (m, c) so that eq. 5 scores are ``V P`` (any chunk of rows, any new point).

    ``class_weight="balanced"`` divides each class column by its number of labeled points (eq. 5 sums, which
    favours the class with more labeled points; the paper uses the plain sum); an array (c,) of weights >= 0
    (from a ``{class: weight}`` dict, :func:`class_weight_vector`) multiplies each class column.
    """
    C = np.zeros((codes.size, n_classes))
    C[np.arange(codes.size), codes] = 1.0
    if isinstance(class_weight, str) and class_weight == "balanced":
        C /= C.sum(axis=0, keepdims=True)
    elif class_weight is not None:
        C *= np.asarray(class_weight, dtype=np.float64)[None, :]
    return mu[:, None] * (V_labeled.T @ C)


def class_weight_vector(class_weight, classes: np.ndarray):
    """None / "balanced" as given, or a ``{class: weight}`` dict as an array (c,) (missing classes: 1).

    Raises ParameterError for a key that is not a class or a weight that is negative or not finite.
    """
    if class_weight is None or (isinstance(class_weight, str) and class_weight == "balanced"):
        return class_weight
    w = np.ones(classes.size)
    for key, value in class_weight.items():
        pos = np.flatnonzero(classes == key)
        if pos.size != 1:
            raise ParameterError(f"class_weight has key {key!r}, which is not one of the classes {classes.tolist()}")
        w[pos[0]] = check_float(f"class_weight[{key!r}]", value, low=0.0)
    return w


def score_distributions(scores: np.ndarray) -> np.ndarray:
    """Row distributions (s, c) of eq. 5 / 19 scores: ``max(score, 0)`` normalized per row (LabelSpreading's
    normalization of its label scores). A row without a positive score (no class reaches the point with
    positive kernel weight) puts its mass on its largest scores, so ``argmax`` is always the predicted class."""
    pos = np.clip(scores, 0.0, None)
    total = pos.sum(axis=1, keepdims=True)
    none = total[:, 0] <= 0
    if np.any(none):
        top = scores[none] == scores[none].max(axis=1, keepdims=True)
        pos[none] = top
        total[none] = top.sum(axis=1, keepdims=True)
    return pos / total


def normalized_propagation(W_new, degrees: np.ndarray, F: np.ndarray, log_scale: np.ndarray) -> np.ndarray:
    """``S(x, X) F`` (s, c) with ``S(x, x_i) = W(x, x_i) / sqrt(D_xx D_ii)`` for s new points.

    ``W_new`` (s, n) rows scaled by ``exp(-log_scale)`` (:func:`spectral.graph.weights.query_weights`), ``degrees``
    (n,), ``F`` (n, c); a point without an edge to the training graph gets a zero row.
    """
    Wn = sp.csr_matrix(W_new, dtype=np.float64)
    d_x = np.asarray(Wn.sum(axis=1)).ravel()
    scale = np.zeros_like(d_x)
    ok = d_x > 0
    scale[ok] = np.exp(0.5 * np.asarray(log_scale, float)[ok]) / np.sqrt(d_x[ok])  # w_x scales like sqrt(row scale)
    return np.asarray(Wn @ (F / np.sqrt(degrees)[:, None])) * scale[:, None]


def transductive_scores(vectors_chunk: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Eq. 5 scores (rows, c) of a chunk of training rows ``V`` (rows, m) with ``P`` from :func:`class_matrix`."""
    return np.asarray(vectors_chunk, dtype=np.float64) @ P
