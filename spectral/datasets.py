"""Generated manifold datasets (pure numpy, no file I/O) for the demo, the tests and the benchmarks.

The generators return in-memory arrays; writing them to files or stores is the job of the callers
(``benchmarks/bench_support.py``, the ``eigenflow demo`` command).
"""

from __future__ import annotations

import numpy as np

from eigenflow.spectral._validation import check_float, check_int, check_random_state
from eigenflow.spectral.errors import InputDataError

#: Number of ambient dimensions the 3-D manifolds are lifted into (the benchmarks' setting).
DEFAULT_N_FEATURES = 32

#: The roll makes 1.5 turns: t in [1.5 pi, 4.5 pi] as in scikit-learn's ``make_swiss_roll``; its arc length
#: is (4.5^2 - 1.5^2) pi^2 / 2 ~ 88.8.
_T_MIN, _T_MAX = 1.5 * np.pi, 4.5 * np.pi
#: Default height 60 (scikit-learn uses 21): taller than half the arc length, so the second Laplacian
#: eigenfunction follows the height rather than the second harmonic along the roll, and a 2-D Laplacian
#: eigenmap unrolls the sheet into a rectangle-like picture (eigenvalues ~ (pi / 88.8)^2 < (pi / 60)^2
#: < (2 pi / 88.8)^2).
DEFAULT_HEIGHT = 60.0


def make_swiss_roll_lifted(
    n_samples: int,
    *,
    n_features: int = DEFAULT_N_FEATURES,
    n_classes: int = 6,
    noise: float = 0.05,
    height: float = DEFAULT_HEIGHT,
    random_state=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A labeled Swiss roll embedded isometrically in ``n_features`` dimensions, plus isotropic noise.

    Points ``(t cos t, h, t sin t)`` with ``t`` uniform on ``[1.5 pi, 4.5 pi]`` and ``h`` uniform on
    ``[0, height]`` are rotated into ``R^n_features`` by a random orthonormal ``(3, n_features)`` map and
    perturbed by Gaussian noise of standard deviation ``noise`` per coordinate. Classes are
    ``n_classes`` bands of equal arc-parameter width along ``t``, so a good 2-D embedding that unrolls
    the manifold separates them (1-NN accuracy near 1) while the raw roll interleaves distant bands.

    Parameters
    ----------
    n_samples : int >= 2
    n_features : int >= 3
    n_classes : int in [1, 50]
    noise : float >= 0
        Standard deviation of the ambient Gaussian noise (the roll has a diameter of about 28).
    height : float > 0
        Extent of the sheet across the roll (see :data:`DEFAULT_HEIGHT`).
    random_state : None, int or numpy Generator
        The one seed entry point; the same seed gives the same data.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), float32
    y : ndarray of shape (n_samples,), int64
        Band labels in ``[0, n_classes)``.
    t : ndarray of shape (n_samples, 2), float64
        The intrinsic coordinates ``(t, h)`` of each point (ground truth of the unrolling).
    """
    n_samples = check_int("n_samples", n_samples, low=2)
    n_features = check_int("n_features", n_features, low=3)
    n_classes = check_int("n_classes", n_classes, low=1, high=50)
    noise = check_float("noise", noise, low=0.0)
    height = check_float("height", height, low=0.0, low_inclusive=False)
    rng = check_random_state(random_state)
    t = rng.uniform(_T_MIN, _T_MAX, size=n_samples)
    h = rng.uniform(0.0, height, size=n_samples)
    P3 = np.column_stack([t * np.cos(t), h, t * np.sin(t)])  # (n, 3)
    Q = _random_orthonormal(n_features, 3, rng)  # (n_features, 3)
    X = P3 @ Q.T  # (n, n_features), isometric lift
    if noise > 0:
        X += rng.normal(scale=noise, size=X.shape)
    y = _bands(t, n_classes)
    return X.astype(np.float32), y, np.column_stack([t, h])


def holdout_mask(n_samples: int, fraction: float, *, random_state=None) -> np.ndarray:
    """Boolean mask of ``round(fraction * n_samples)`` held-out points chosen uniformly at random.

    Parameters
    ----------
    n_samples : int >= 1
    fraction : float in [0, 1)
    random_state : None, int or numpy Generator

    Returns
    -------
    mask : ndarray of shape (n_samples,), bool
        True for held-out points.
    """
    n_samples = check_int("n_samples", n_samples, low=1)
    fraction = check_float("fraction", fraction, low=0.0, high=1.0, high_inclusive=False)
    rng = check_random_state(random_state)
    mask = np.zeros(n_samples, dtype=bool)
    n_out = int(round(fraction * n_samples))
    mask[rng.choice(n_samples, size=n_out, replace=False)] = True
    return mask


def _bands(t: np.ndarray, n_classes: int) -> np.ndarray:
    """Label ``t`` by its band among ``n_classes`` equal-width bands of ``[_T_MIN, _T_MAX]``."""
    width = (_T_MAX - _T_MIN) / n_classes
    return np.minimum(((t - _T_MIN) // width).astype(np.int64), n_classes - 1)


def _random_orthonormal(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """An ``(n, k)`` matrix with orthonormal columns, drawn from the Haar measure (QR of a Gaussian)."""
    Q, R = np.linalg.qr(rng.normal(size=(n, k)))
    return Q * np.sign(np.diag(R))  # sign fix makes the draw unique for a given rng


def stratified_subset(y_fit: np.ndarray, size: int, random_state: int | None, rows: np.ndarray) -> np.ndarray:
    """Sorted entries of ``rows`` (n,) forming a stratified random subset of at most ``size`` of its labeled
    points (``y_fit`` (n,): the labels of ``rows``, -1 = unlabeled); NSSE / SUPLAP train on it (O(N^3) fits).

    Each class keeps ``size`` times its share of the labeled points (at least 2, for within-class graphs);
    all labeled points when there are at most ``size``. The draw uses ``random_state``.
    """
    labeled = np.flatnonzero(y_fit >= 0)
    if labeled.size == 0:
        raise InputDataError("the fit set has no labeled points (labels -1 everywhere)")
    if labeled.size <= size:
        return rows[labeled]
    rng = check_random_state(random_state)
    classes, counts = np.unique(y_fit[labeled], return_counts=True)
    quota = np.maximum(2, np.floor(size * counts / counts.sum()).astype(int))
    quota[np.argsort(-counts)[: max(0, size - quota.sum())]] += 1  # hand out the remainder
    for c in np.argsort(-counts)[: max(0, quota.sum() - size)]:  # the minimum of 2 overshot: take from the largest
        quota[c] -= 1
    picked = [rng.choice(labeled[y_fit[labeled] == c], min(q, k), replace=False)
              for c, q, k in zip(classes, quota, counts)]
    return rows[np.sort(np.concatenate(picked))]


# ---- 2-D clustering sets shaped like those of U-SPEC (Huang et al. 2020), whose generator is not public -------------
#: the shapes of :func:`make_cluster_shapes`: U-SPEC's name, classes
CLUSTER_SHAPES = {"rings": ("CC", 3), "rings_and_blobs": ("CG", 11), "flower": ("Flower", 13)}


def make_cluster_shapes(shape: str, n_samples: int, *, random_state=None) -> tuple[np.ndarray, np.ndarray]:
    """A seeded 2-D clustering set ``(X (n, 2) float64, y (n,) int64)`` of :data:`CLUSTER_SHAPES`, classes of equal size
    (the first ``n % classes`` one point larger).

    - ``"rings"``: three concentric noisy rings (radii 1, 2, 3; radial noise 0.1);
    - ``"rings_and_blobs"``: an outer ring (radius 10) and an inner ring (radius 4) around a central Gaussian, and eight
      Gaussian blobs on the circle of radius 7 between them (ring noise 0.3, blob std 0.6, centre std 1);
    - ``"flower"``: a Gaussian centre (std 0.5), six spokes (segments from radius 1.5 to 5, noise 0.15) and six petals
      (ellipse outlines, semi-axes 2.5 and 1.2, centred at radius 8 between the spokes, noise 0.15).
    """
    if shape not in CLUSTER_SHAPES:
        raise InputDataError(f"shape must be one of {sorted(CLUSTER_SHAPES)}; got {shape!r}")
    n_classes = CLUSTER_SHAPES[shape][1]
    n = check_int("n_samples", n_samples, low=n_classes)
    rng = check_random_state(random_state)
    sizes = np.full(n_classes, n // n_classes) + (np.arange(n_classes) < n % n_classes)
    parts = []
    for c, m in enumerate(sizes):
        parts.append(_shape_part(shape, c, int(m), rng))
    return np.concatenate(parts), np.repeat(np.arange(n_classes, dtype=np.int64), sizes)


def _ring(m: int, radius: float, noise: float, rng: np.random.Generator, center=(0.0, 0.0)) -> np.ndarray:
    t = rng.uniform(0.0, 2 * np.pi, m)
    r = radius + noise * rng.standard_normal(m)
    return np.column_stack([center[0] + r * np.cos(t), center[1] + r * np.sin(t)])


def _shape_part(shape: str, c: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """The ``m`` points of class ``c`` of ``shape``."""
    if shape == "rings":
        return _ring(m, 1.0 + c, 0.1, rng)
    if shape == "rings_and_blobs":
        if c < 2:
            return _ring(m, (10.0, 4.0)[c], 0.3, rng)
        if c == 2:
            return rng.standard_normal((m, 2))
        a = 2 * np.pi * (c - 3) / 8
        return 7.0 * np.array([np.cos(a), np.sin(a)]) + 0.6 * rng.standard_normal((m, 2))
    if c == 0:
        return 0.5 * rng.standard_normal((m, 2))
    if c <= 6:  # a spoke
        a = 2 * np.pi * (c - 1) / 6
        r = rng.uniform(1.5, 5.0, m)
        return np.column_stack([r * np.cos(a), r * np.sin(a)]) + 0.15 * rng.standard_normal((m, 2))
    a = 2 * np.pi * (c - 7) / 6 + np.pi / 6  # a petal, between two spokes
    t = rng.uniform(0.0, 2 * np.pi, m)
    u = np.column_stack([2.5 * np.cos(t), 1.2 * np.sin(t)]) + 0.15 * rng.standard_normal((m, 2))
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return u @ rot.T + 8.0 * np.array([np.cos(a), np.sin(a)])
