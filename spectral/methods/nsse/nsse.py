"""NSSE and SUPLAP estimators (OV19, Örnek & Vural 2019: "Nonlinear supervised dimensionality reduction via smooth
regular embeddings", Algorithm 1, eqs. 6-14).

NSSE learns the training embedding ``Y (N, d)``, ``Y^T Y = I``, jointly with the scale ``sigma`` of a
Gaussian RBF interpolator by minimizing (eq. 11)

    J(Y, sigma) = tr(Y^T L_w Y) - mu1 tr(Y^T L_b Y) + mu2 tr(Y^T Psi_sigma^-2 Y) + mu3 / sigma^2

alternately in Y (eq. 12-13: the d eigenvectors of L_w - mu1 L_b + mu2 Psi^-2 with the smallest
eigenvalues) and in sigma (eq. 14: dense search over a grid containing the current sigma, so that
neither step increases J). New points are mapped by f(x) = sum_i c_i exp(-||x - x_i||^2 / sigma^2) with
C = Psi^-1 Y (eq. 6-7). Psi is regularized and factorized as documented in :mod:`._rbf`.

SUPLAP (the paper's main baseline, its ref. [15]) minimizes the same within/between objective without
the interpolator terms (mu2 = mu3 = 0) and is extended by the same RBF interpolator form.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from eigenflow.spectral._transformer import EmbeddingTransformerMixin
from eigenflow.spectral._validation import (check_fitted_X, check_float, check_int, check_labels, check_random_state, clip_int,
                                  validate_X)
from eigenflow.spectral.eigen import eigensolve
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.graph.laplacian import dense_laplacian
from eigenflow.spectral.methods.nsse import _rbf
from eigenflow.spectral.methods.nsse._graphs import class_graphs, squared_distances

#: Default sigma grid, as multiples of the median nearest-neighbour distance s0 of the training points:
#: from 0.25 s0 (Psi ~ identity, C ~ Y) to 16 s0 (Psi numerically singular), 25 log-spaced values.
SIGMA_GRID_FACTORS = np.geomspace(0.25, 16.0, 25)
#: Default initial sigma (and SUPLAP's interpolator scale): the geometric centre of that grid, 2 s0.
SIGMA_INIT_FACTOR = 2.0
#: Default mu1 (weight of the between-class Laplacian) of NSSE and SUPLAP: at or near the best of
#: {1, 0.1, 0.01, 0.001, 0} for both on USPS / COIL-20 / ORL (``benchmarks/results/defaults_vs_tuned.md``), and
#: within the range the CV of ``benchmarks/reproduce_nsse.py`` picks on COIL-20, ORL and Yale B.
DEFAULT_MU1 = 0.01


def _loo_1nn_error(Y: np.ndarray, y: np.ndarray) -> float:
    """Leave-one-out 1-NN misclassification rate of the training embedding ``Y (N, d)``."""
    D = squared_distances(Y, Y)
    np.fill_diagonal(D, np.inf)
    return float(np.mean(y[np.argmin(D, axis=1)] != y))


def _check_xy(est, X, y):
    """Validate the training data; return ``(X float64 (N, n), y codes (N,), classes)``.

    ``X`` goes through scikit-learn's ``validate_data`` (sets ``n_features_in_``; refuses sparse,
    complex, object, NaN/inf and empty input with scikit-learn's messages).
    """
    X = validate_X(est, X, min_samples=3)
    _, classes, codes = check_labels(y, X.shape[0], estimator=type(est).__name__)
    counts = np.bincount(codes, minlength=classes.size)
    if counts.min() < 2:
        bad = classes[int(np.argmin(counts))]
        raise InputDataError(
            f"every class needs at least 2 training samples (for the within-class graph); class {bad!r} has 1"
        )
    return X, codes, classes


def _median_nn_distance(D2: np.ndarray) -> float:
    """Median distance from each training point to its nearest other point (the scale s0)."""
    D = D2.copy()
    np.fill_diagonal(D, np.inf)
    s0 = float(np.sqrt(np.median(D.min(axis=1))))
    if s0 <= 0.0:
        raise InputDataError("X has duplicated rows for most points (median nearest-neighbour distance is 0)")
    return s0


def _y_step(Lwb: np.ndarray, Pinv2: np.ndarray | None, mu2: float, d: int,
            rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Eq. 12-13: ``Y`` = d eigenvectors of ``L_w - mu1 L_b + mu2 Psi^-2`` with smallest eigenvalues.

    Solved by :func:`spectral.eigen.eigensolve` with ``solver="dense"`` (LAPACK ``eigh`` on the d lowest
    pairs; residuals checked, signs fixed). ``rng`` is the fit's generator, passed as the solver's
    ``random_state``; the dense solver draws nothing from it (see ``NSSE.random_state``).
    Returns ``Y (N, d)`` and ``tr(Y^T A Y)`` (= the sum of those eigenvalues).
    """
    A = Lwb if Pinv2 is None else Lwb + mu2 * Pinv2
    res = eigensolve(A, d, which="smallest", solver="dense", random_state=rng)
    return res.vectors, float(res.values.sum())


def _sigma_step(D2, Y, grid, current, mu2, mu3, ridge) -> tuple[float, float]:
    """Eq. 14: ``argmin_sigma mu2 tr(Y^T Psi_sigma^-2 Y) + mu3 / sigma^2`` over ``grid`` (which holds
    ``current``); moves only on a strict decrease. Returns ``(sigma, mu2 * term + mu3 / sigma^2)``."""
    def value(s):
        return (mu2 * _rbf.regularity_term(D2, Y, s, ridge) if mu2 > 0 else 0.0) + mu3 / s**2

    best_s, best_v = current, value(current)
    for s in grid:
        if s != current:
            v = value(s)
            if v < best_v:
                best_s, best_v = float(s), v
    return best_s, best_v


class _RBFEmbedding(EmbeddingTransformerMixin, BaseEstimator):
    """Shared fitted state and out-of-sample map of NSSE and SUPLAP (the RBF interpolator, eq. 6)."""

    def _finish(self, X, Y, D2, sigma):
        """Store the training set, Y and the interpolator coefficients C = Psi_r^-1 Y (eq. 7)."""
        self.centers_ = X
        self.embedding_ = Y
        self.sigma_ = float(sigma)
        self.coef_ = _rbf.rbf_coefficients(D2, Y, self.sigma_, self.ridge)
        self.lipschitz_bound_ = _rbf.lipschitz_bound(self.coef_, self.sigma_)
        self.n_features_in_ = X.shape[1]
        return self

    def transform(self, X):
        """Embed ``X (m, n)`` with the interpolator ``f`` (eq. 6); returns ``(m, n_components)``.

        ``transform(X_train)`` reproduces ``embedding_`` up to ``ridge * |C|`` (see :mod:`._rbf`).
        """
        X = check_fitted_X(self, X, "coef_")
        return _rbf.rbf_interpolate(X, self.centers_, self.coef_, self.sigma_)

    def fit_transform(self, X, y=None, **fit_params):
        """Fit, then return the training embedding ``embedding_ (N, n_components)``."""
        return self.fit(X, y).embedding_

    def to_state(self) -> tuple[dict, dict]:
        """Arrays and JSON-able attrs sufficient to embed new points (model_state protocol).

        A ``random_state`` that is not None or an int (a Generator) is not JSON-able and is recorded as
        None: the stored model only embeds new points, which uses no randomness.
        """
        check_is_fitted(self, "coef_")
        arrays = {"centers": self.centers_, "coef": self.coef_, "embedding": self.embedding_}
        params = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.get_params().items()}
        if not (params["random_state"] is None or isinstance(params["random_state"], (int, np.integer))):
            params["random_state"] = None
        elif params["random_state"] is not None:
            params["random_state"] = int(params["random_state"])
        attrs = {"method": type(self).__name__, "sigma": self.sigma_, "params": params}  # JSON-able
        return arrays, attrs

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict):
        """Rebuild a fitted estimator (interpolator only) from :meth:`to_state` output."""
        est = cls(**attrs["params"])
        est.centers_ = np.asarray(arrays["centers"], dtype=np.float64)
        est.coef_ = np.asarray(arrays["coef"], dtype=np.float64)
        est.embedding_ = np.asarray(arrays["embedding"], dtype=np.float64)
        est.sigma_ = float(attrs["sigma"])
        est.n_features_in_ = est.centers_.shape[1]
        est.lipschitz_bound_ = _rbf.lipschitz_bound(est.coef_, est.sigma_)
        return est


def _check_common(est) -> tuple[float, int]:
    """Validate the parameters shared by NSSE and SUPLAP; return ``(mu1, n_neighbors)``."""
    mu1 = check_float("mu1", est.mu1, low=0.0)
    k = check_int("n_neighbors", est.n_neighbors, low=1)
    check_float("ridge", est.ridge, low=0.0, high=1.0, low_inclusive=False)
    if est.graph_bandwidth is not None:
        check_float("graph_bandwidth", est.graph_bandwidth, low=0.0, low_inclusive=False)
    return mu1, k


def _prepare(est, X, y):
    """Shared first stage: validated data, D2 (N, N), ``L_w - mu1 L_b`` (N, N) and the scale s0."""
    mu1, k = _check_common(est)
    X, codes, classes = _check_xy(est, X, y)
    est.n_components_ = clip_int("n_components", est.n_components, X.shape[0] - 1)
    D2 = squared_distances(X, X)
    W_w, W_b, t = class_graphs(D2, codes, k, est.graph_bandwidth)
    est.classes_, est.graph_bandwidth_ = classes, t
    return X, codes, D2, dense_laplacian(W_w)[0] - mu1 * dense_laplacian(W_b)[0], _median_nn_distance(D2)


class NSSE(_RBFEmbedding):
    """Nonlinear Supervised Smooth Embedding (OV19, Algorithm 1).

    Parameters
    ----------
    n_components : int
        Embedding dimension d, in [1, N - 1].
    mu1, mu2, mu3 : float >= 0
        Weights of eq. 11: between-class separation, interpolator norm ||C||_F^2 and 1/sigma^2.
        The paper (Sect. 5.1) finds mu1 in [100, 1000], mu2 in [1e-4, 1e-3], mu3 in [1, 5] for its
        image scaling and leaves them to cross-validation. Default mu1 = :data:`DEFAULT_MU1` (0.01): a large
        mu1 lets the between-class term dominate (the Y-step then picks the top eigenvectors of L_b, localized
        on a few points), which loses most of the held-out 1-NN accuracy on the bundled data sets
        (``benchmarks/results/defaults_vs_tuned.md`` records both settings).
    n_neighbors : int
        Neighbours per point in the within- and between-class graphs (see ``_graphs.class_graphs``).
    sigma_grid : array-like of float > 0, optional
        The values searched in the sigma-step (eq. 14). ``None``: ``SIGMA_GRID_FACTORS * s0`` with s0 the
        median nearest-neighbour distance of the training points.
    sigma_init : float > 0, optional
        Initial sigma (added to the grid). ``None``: ``SIGMA_INIT_FACTOR * s0``.
    max_iter : int
        Maximum number of alternating iterations.
    tol : float
        Stop when the objective changes by at most ``tol * max(|J|, 1e-12)`` over one iteration.
    graph_bandwidth : float > 0, optional
        Bandwidth of the Gaussian graph weights; ``None``: median within-class kNN edge length.
    ridge : float in (0, 1]
        Ridge added to Psi before any factorization (see :mod:`spectral.methods.nsse._rbf`).
    random_state : None, int or numpy Generator
        The fit's one seed entry point (:func:`spectral._validation.check_random_state`), passed to the
        Y-step eigensolver (:func:`spectral.eigen.eigensolve`, ``random_state``). NSSE has no other random
        step (the class graphs, the sigma search and the interpolator are deterministic), and the Y-step
        uses the exact dense solver, which draws no start vector: the fit is deterministic, the same for
        every seed, and two fits with the same seed are identical.

    Attributes
    ----------
    embedding_ : ndarray (N, d)      Training embedding Y, Y^T Y = I.
    sigma_ : float                   Final RBF scale.
    coef_ : ndarray (N, d)           Interpolator coefficients C = Psi_r^-1 Y.
    centers_ : ndarray (N, n)        Training points (the RBF centres).
    history_ : list of dict          Per iteration: ``objective_after_Y``, ``objective`` (after the
        sigma-step), ``sigma``, ``train_error`` (leave-one-out 1-NN error of Y), ``condition_number``
        (of Psi at the sigma used in the Y-step; NaN when mu2 = 0, where Psi is not formed).
    n_iter_ : int; converged_ : bool; lipschitz_bound_ : float (sqrt(N) L_phi ||C||_F);
    classes_ : ndarray; graph_bandwidth_ : float; sigma_grid_ : ndarray.
    """

    def __init__(self, n_components=2, *, mu1=DEFAULT_MU1, mu2=1e-3, mu3=1.0, n_neighbors=5, sigma_grid=None,
                 sigma_init=None, max_iter=20, tol=1e-4, graph_bandwidth=None, ridge=_rbf.RIDGE,
                 random_state=None):
        self.n_components = n_components
        self.mu1 = mu1
        self.mu2 = mu2
        self.mu3 = mu3
        self.n_neighbors = n_neighbors
        self.sigma_grid = sigma_grid
        self.sigma_init = sigma_init
        self.max_iter = max_iter
        self.tol = tol
        self.graph_bandwidth = graph_bandwidth
        self.ridge = ridge
        self.random_state = random_state

    def _grid(self, s0: float) -> tuple[np.ndarray, float]:
        """Validated sigma grid (sorted, with the initial sigma in it) and the initial sigma."""
        if self.sigma_grid is None:
            grid = SIGMA_GRID_FACTORS * s0
        else:
            grid = np.atleast_1d(np.asarray(self.sigma_grid, dtype=np.float64))
            if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
                raise ParameterError(
                    f"sigma_grid must be a non-empty 1-D array of finite values > 0; got {self.sigma_grid!r}"
                )
        if self.sigma_init is None:
            s_init = SIGMA_INIT_FACTOR * s0 if self.sigma_grid is None else float(np.exp(np.log(grid).mean()))
            s_init = float(grid[np.argmin(np.abs(np.log(grid / s_init)))])
        else:
            s_init = check_float("sigma_init", self.sigma_init, low=0.0, low_inclusive=False)
        return np.unique(np.append(grid, s_init)), s_init

    def fit(self, X, y):
        """Learn Y, sigma and the interpolator from labeled ``X (N, n)``, ``y (N,)`` (Algorithm 1)."""
        mu2 = check_float("mu2", self.mu2, low=0.0)
        mu3 = check_float("mu3", self.mu3, low=0.0)
        max_iter = check_int("max_iter", self.max_iter, low=1)
        tol = check_float("tol", self.tol, low=0.0)
        rng = check_random_state(self.random_state)
        X, codes, D2, Lwb, s0 = _prepare(self, X, y)
        self.sigma_grid_, sigma = self._grid(s0)
        d, history, prev, converged = self.n_components_, [], None, False
        for it in range(1, max_iter + 1):
            Pinv2, cond = None, float("nan")
            if mu2 > 0:
                lam, U, cond = _rbf.psi_eig(D2, sigma, self.ridge)
                Pinv2 = _rbf.psi_inv2(lam, U)
            Y, trace = _y_step(Lwb, Pinv2, mu2, d, rng)  # eq. 12-13
            obj_y = trace + mu3 / sigma**2
            sigma, interp = _sigma_step(D2, Y, self.sigma_grid_, sigma, mu2, mu3, self.ridge)  # eq. 14
            obj = float(np.trace(Y.T @ Lwb @ Y)) + interp
            history.append({"iteration": it, "objective_after_Y": float(obj_y), "objective": float(obj), "sigma": float(sigma),
                            "train_error": _loo_1nn_error(Y, codes), "condition_number": cond})
            if prev is not None and abs(prev - obj) <= tol * max(abs(obj), 1e-12):
                converged = True
                break
            prev = obj
        self.history_, self.n_iter_, self.converged_ = history, it, converged
        return self._finish(X, Y, D2, sigma)


class SupervisedLaplacianEigenmaps(_RBFEmbedding):
    """SUPLAP (OV19's baseline, its ref. [15]): Y = d eigenvectors of ``L_w - mu1 L_b`` with the
    smallest eigenvalues (Y^T Y = I, eq. 2), extended to new points by NSSE's RBF interpolator (eq. 6).

    Parameters are those of :class:`NSSE` (``random_state`` included, with the same meaning) without
    mu2 / mu3 / the sigma search; ``sigma`` is the interpolator scale (``None``: ``SIGMA_INIT_FACTOR * s0``,
    NSSE's default initial sigma), so that SUPLAP equals NSSE with ``mu2 = mu3 = 0``. Default mu1 as NSSE's
    (:data:`DEFAULT_MU1`; a large mu1 lets the between-class term dominate here too).
    """

    def __init__(self, n_components=2, *, mu1=DEFAULT_MU1, n_neighbors=5, sigma=None, graph_bandwidth=None,
                 ridge=_rbf.RIDGE, random_state=None):
        self.n_components = n_components
        self.mu1 = mu1
        self.n_neighbors = n_neighbors
        self.sigma = sigma
        self.graph_bandwidth = graph_bandwidth
        self.ridge = ridge
        self.random_state = random_state

    def fit(self, X, y):
        """Learn the training embedding and its interpolator from ``X (N, n)``, ``y (N,)``."""
        if self.sigma is not None:
            check_float("sigma", self.sigma, low=0.0, low_inclusive=False)
        rng = check_random_state(self.random_state)
        X, _, D2, Lwb, s0 = _prepare(self, X, y)
        Y, _ = _y_step(Lwb, None, 0.0, self.n_components_, rng)
        sigma = SIGMA_INIT_FACTOR * s0 if self.sigma is None else float(self.sigma)
        return self._finish(X, Y, D2, sigma)
