"""DNE, MFA and LFDA with their semi-supervised, kernel and transductive forms (CK08).

One estimator per algorithm; the six variants of the paper are parameters:

- supervised (``gamma=0``, only the labeled points are used) or semi-supervised (``gamma>0``:
  ``W = W^(1) + gamma W^(2)``, eq. 12, W^(2) over labeled and unlabeled points);
- ``mode="linear"`` (eq. 7, ``z = A x``), ``"kernel"`` (eq. 10, ``z = U k(x)``, optionally on Nyström
  features with ``n_landmarks``) or ``"transductive"`` (eq. 4 / 13, the given points only).

``regularization="eps"`` solves with ``C + eps I`` (remark 1; eps relative to the mean diagonal of C);
``"pca"`` first restricts the problem to the span of the centered (kernel) features, PCA / KPCA (remark 1),
keeping the leading directions that explain ``pca_variance`` of the variance (all: ``pca_variance=1``), then
adds the same ridge when ``reg_eps > 0``; ``"auto"`` (default) is ``"pca"`` except in transductive mode. The kernel
variant with ``"pca"`` is the linear variant on the KPCA features ``Phi = V Lambda^(1/2)`` of K: ``U = V Lambda^(-1/2)
B`` gives ``U K (D-W) K U^T = B Phi^T (D-W) Phi B^T`` (eq. 9), so both share one code path with the Nyström variant.
"""

from __future__ import annotations

import copy

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from eigenflow.spectral._transformer import EmbeddingTransformerMixin
from eigenflow.spectral._validation import (check_choice, check_float, check_int, check_labels, check_random_state, clip_int,
                           validate_X)
from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.errors import InputDataError, ParameterError
from eigenflow.spectral.methods.discriminant import graphs, solve
from eigenflow.spectral.methods.discriminant._kernel import centered_kpca_map, landmark_map, resolve_kernel

MODES = ("linear", "kernel", "transductive")
#: what to do with a labeled class of fewer than n_neighbors points (see the ``small_classes`` parameter)
SMALL_CLASSES = ("error", "keep")


class _DiscriminantEstimator(EmbeddingTransformerMixin, BaseEstimator):
    """Common machinery of DNE / MFA / LFDA; subclasses set ``_method``.

    Parameters
    ----------
    n_components : int or None
        Target dimensionality d. None: number of negative eigenvalues (DNE), number of classes c (MFA, LFDA),
        capped at the problem dimension (Sect. 5).
    n_neighbors : int, default 3
        k of Neig^I / Neig^E (Sect. 2.1.2, Sect. 5); every labeled class needs at least k points unless
        ``small_classes="keep"``.
    small_classes : {"error", "keep"}, default "error"
        A labeled class with fewer than ``n_neighbors`` points: an error (Sect. 5 chooses k "to ensure that
        every class has at least k points"), or kept as labeled with Neig^I = its n_c - 1 other points (a
        singleton gets no W^I edge, still W^E edges and, for LFDA, its 1/n_k and -1/n weights).
    gamma : float >= 0, default 0
        Weight of the manifold regularizer W^(2) (eq. 12). 0: supervised, only labeled points are used.
    mode : {"linear", "kernel", "transductive"}
        Eq. 7 (``z = A x``), eq. 10 (``z = U k(x)``) or eq. 4 / 13 (the training points only).
    kernel, kernel_params : str or callable, dict
        scikit-learn kernel name (default "poly" with degree 2, gamma 1, coef0 0: ``<x, x'>^2``, Sect. 5) or
        ``k(X, Y, **kernel_params) -> (n, m)``. The kNN graphs of the kernel mode use feature-space distances.
    manifold_neighbors : int or None
        k of W^(2) (default ``n_neighbors``); with ``manifold_graph="full"`` the neighbour defining sigma_i.
    manifold_graph : {"knn", "full"}
        W^(2) on the OR-symmetrized kNN graph, or on all pairs (the LFDA implementation's affinity).
    manifold_weighting : {"local_scaling", "heat", "binary"}
        Weights of W^(2) (eq. 14-15, exponent sign corrected).
    regularization : {"auto", "eps", "pca"}, reg_eps : float >= 0
        ``C + eps s I`` (s = mean diagonal of C), or PCA / KPCA reduction of the search space first (remark 1).
        "auto" (default): "pca" in linear and kernel modes, "eps" in transductive mode.
    pca_variance : float in (0, 1], default 0.99
        Fraction of the centered (kernel) feature variance kept by the "pca" reduction; 1 keeps every direction
        of nonzero variance. Why these defaults: with "eps" and every direction kept, linear MFA and LFDA
        spend their components on directions of near-zero variance, where within- and between-class scatter
        are both ~0, and their held-out 1-NN accuracy collapses; the reduction to the leading directions
        removes them (``benchmarks/results/defaults_vs_tuned.md`` records both settings).
    scaling : {"identity", "unit_norm", "sqrt_eigenvalue", "sqrt_eigenvalue_unit_norm"}
        The four choices of T of remark 2, applied to the columns of the projection.
    n_landmarks : int or None
        Kernel mode on Nyström features of this many random training points (Sect. 4).
    random_state : None, int or Generator
        Seed of the landmark draw.

    Attributes
    ----------
    coef_ : ndarray (d0, d) or (n_basis, d)
        ``A^T`` (linear) or ``U^T`` (kernel): ``z = x coef_ - offset_`` or ``z = k(x, basis_) coef_ - offset_``.
    offset_ : ndarray (d,)
    basis_ : ndarray (n_basis, d0) or None
        Training points or landmarks of the kernel map.
    eigenvalues_ : ndarray (d,)
        Generalized eigenvalues of the kept directions (ascending).
    n_null_ : int
        Candidate directions left out because every training point has the same coordinate along them
        (with ``C + eps I`` they solve the problem with eigenvalue 0 and no information; zero with ``"pca"``).
    component_norms_ : ndarray (d,)
        Norms ``||z^(i)||`` of the unscaled solution's columns (T of remark 2; see :meth:`rescaled`).
    embedding_ : ndarray (n, d)
        Embedding of the points given to ``fit`` (all of them, labeled or not).
    n_components_ : int
    classes_ : ndarray
    """

    _method = ""

    def __init__(
        self,
        n_components=None,
        *,
        n_neighbors=3,
        gamma=0.0,
        mode="linear",
        kernel="poly",
        kernel_params=None,
        manifold_neighbors=None,
        manifold_graph="knn",
        manifold_weighting="local_scaling",
        regularization="auto",
        reg_eps=1e-4,
        pca_variance=solve.DEFAULT_PCA_VARIANCE,
        scaling="identity",
        n_landmarks=None,
        random_state=None,
        small_classes="error",
    ):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.gamma = gamma
        self.mode = mode
        self.kernel = kernel
        self.kernel_params = kernel_params
        self.manifold_neighbors = manifold_neighbors
        self.manifold_graph = manifold_graph
        self.manifold_weighting = manifold_weighting
        self.regularization = regularization
        self.reg_eps = reg_eps
        self.pca_variance = pca_variance
        self.scaling = scaling
        self.n_landmarks = n_landmarks
        self.random_state = random_state
        self.small_classes = small_classes

    # ------------------------------------------------------------------ validation
    def _regularization(self) -> str:
        """The regularization used: ``regularization`` with "auto" resolved for ``mode``."""
        return solve.resolve_regularization(self.regularization, self.mode)

    def _check_params(self) -> None:
        check_choice("mode", self.mode, MODES)
        check_int("n_neighbors", self.n_neighbors, low=1)
        check_float("gamma", self.gamma, low=0.0)
        check_choice("regularization", self.regularization, solve.REGULARIZATIONS)
        check_float("reg_eps", self.reg_eps, low=0.0)
        check_float("pca_variance", self.pca_variance, low=0.0, high=1.0, low_inclusive=False)
        check_choice("scaling", self.scaling, solve.SCALINGS)
        check_choice("manifold_weighting", self.manifold_weighting, graphs.MANIFOLD_WEIGHTINGS)
        check_choice("manifold_graph", self.manifold_graph, graphs.MANIFOLD_GRAPHS)
        check_choice("small_classes", self.small_classes, SMALL_CLASSES)
        if self.n_components is not None:
            check_int("n_components", self.n_components, low=1)
        if self.manifold_neighbors is not None:
            check_int("manifold_neighbors", self.manifold_neighbors, low=1)
        if self.n_landmarks is not None:
            check_int("n_landmarks", self.n_landmarks, low=1)
            if self.mode != "kernel":
                raise ParameterError(f"n_landmarks needs mode='kernel'; got mode={self.mode!r}")
        if self.mode == "transductive" and self.regularization == "pca":
            raise ParameterError("regularization must be 'eps' with mode='transductive'; got 'pca'")
        if not (callable(self.kernel) or isinstance(self.kernel, str)):
            raise ParameterError(f"kernel must be a string or a callable k(X, Y); got {type(self.kernel).__name__}")

    def _check_labels(self, X: np.ndarray, y) -> np.ndarray:
        """scikit-learn's label rules (:func:`check_labels`, -1 = unlabeled), then the method's own: a label
        to learn from, 2 classes, ``n_neighbors`` points per class. Returns the codes (n,) (index in
        ``classes_``, -1 unlabeled) and sets ``classes_``."""
        _, self.classes_, y = check_labels(y, X.shape[0], estimator=type(self).__name__, semi_supervised=True,
                                           min_classes=0)
        labeled = y[y >= 0]
        if len(labeled) == 0 and self.gamma == 0:
            raise InputDataError("all points are unlabeled and gamma=0: nothing to learn; label points or set gamma > 0")
        classes, counts = self.classes_, np.bincount(labeled, minlength=len(self.classes_))
        if len(classes) == 1:
            raise InputDataError(f"y has one class only ({classes[0]}); DNE/MFA/LFDA need at least 2 classes")
        small = counts < self.n_neighbors
        if np.any(small) and self.small_classes == "error":
            c, nc = classes[small][0], counts[small][0]
            raise InputDataError(
                f"class {c} has {nc} labeled points; every class needs at least n_neighbors={self.n_neighbors} "
                "(CK08 Sect. 5), or pass small_classes='keep'"
            )
        if self.mode == "transductive" and self.gamma == 0 and len(labeled) < len(y):
            raise ParameterError("mode='transductive' with unlabeled points needs gamma > 0 (they have no edge otherwise)")
        return y

    # ------------------------------------------------------------------ fit
    def fit(self, X, y):
        """Fit on ``X`` (n, d0) with labels ``y`` (n,), -1 marking unlabeled points."""
        X = validate_X(self, X, min_samples=2)
        self._check_params()
        y = self._check_labels(X, y)  # codes: index in classes_, -1 unlabeled
        train = np.ones(len(y), bool) if self.gamma > 0 else y >= 0
        Xt, yt = X[train], y[train]
        self._kernel, self._kernel_params = resolve_kernel(self.kernel, self.kernel_params)
        self._feature_basis = False
        D2, feats, K = self._distances_and_features(Xt)
        L1, Lc = graphs.method_laplacians(self._method, D2, yt, self.n_neighbors)
        L = L1
        if self.gamma > 0:
            k2 = self.n_neighbors if self.manifold_neighbors is None else self.manifold_neighbors
            W2 = graphs.manifold_graph(D2, k2, self.manifold_graph, self.manifold_weighting)
            L = L1 + self.gamma * graphs.laplacian(W2)
        L = L.toarray() if hasattr(L, "toarray") else L
        Lc = Lc.toarray() if hasattr(Lc, "toarray") else Lc
        if feats is not None:
            self._fit_features(feats, L, Lc)
        else:
            self._fit_dual(K, L, Lc)
        # transductive: z_i are the entries of the eigenvectors (eq. 4); otherwise A x / U k(x) of every row
        self.embedding_ = self.coef_ - self.offset_ if self.mode == "transductive" else self.transform(X)
        return self

    def _distances_and_features(self, Xt):
        """Squared distances for the kNN graphs and either features (primal path) or K (dual path)."""
        if self.mode in ("linear", "transductive"):
            self.basis_ = None
            self._feature_map = None
            return graphs.sq_dists(Xt), (Xt if self.mode == "linear" else None), None
        if self.n_landmarks is not None:
            m = clip_int("n_landmarks", self.n_landmarks, len(Xt), bound="the number of training points")
            nys = landmark_map(Xt, self._kernel, m, check_random_state(self.random_state))
            self.basis_, self._feature_map = nys.landmarks_, nys.normalization_
            feats = nys.transform(Xt)
            return graphs.sq_dists(feats), feats, None  # feature-space distances through Phi (Sect. 5)
        self.basis_ = Xt
        K = self._kernel(Xt, Xt)
        D2 = graphs.sq_dists_from_gram(K)  # ||phi(x_i) - phi(x_j)|| (Sect. 5)
        if self._regularization() == "pca":
            self._feature_map = centered_kpca_map(K, self.pca_variance)  # KPCA reduction; K M spans the centered features
            self._feature_basis = True
            return D2, K @ self._feature_map, None
        return D2, None, K

    def _fit_features(self, F, L, Lc) -> None:
        """Primal problem (eq. 7) on features F (n, p): linear inputs, KPCA or Nyström features."""
        if self._regularization() == "pca" and self._feature_basis:
            mean, P = F.mean(axis=0), np.eye(F.shape[1])
        elif self._regularization() == "pca":
            mean, P = solve.pca_basis(F, self.pca_variance)
        else:
            mean, P = F.mean(axis=0), np.eye(F.shape[1])
        Fc = F - mean
        self._solve_primal(Fc.T @ L @ Fc, None if Lc is None else Fc.T @ Lc @ Fc, mean, P, Fc.T @ Fc / len(Fc))

    def _solve_primal(self, A_full, B_full, mean, P, cov) -> None:
        """Solve ``P^T A P b = lambda P^T B P b`` (B = I for DNE) and store ``z = (f(x) - mean) P b``.

        ``A_full = F^T L F`` and ``B_full = F^T L_C F`` (p, p) in feature coordinates; ``P`` (p, r) the basis
        of the (PCA-reduced) search space; ``cov`` (p, p) the covariance of the training features, which rules
        out directions with no spread (:func:`solve.has_spread`). Shared with the chunked path (:mod:`.scale`).
        """
        A = P.T @ A_full @ P
        B = np.eye(P.shape[1]) if B_full is None else solve.ridge(P.T @ B_full @ P, self.reg_eps)
        values, vecs = solve.generalized_eigh(A, B, self._method)
        W = P @ vecs
        spread = np.sqrt(np.maximum(np.einsum("pm,pq,qm->m", W, cov, W), 0.0))
        scale = float(np.sqrt(max(np.linalg.eigvalsh(0.5 * (cov + cov.T))[-1], 0.0)))
        values, W = self._informative(values, W, spread, np.linalg.norm(W, axis=0), scale)
        d = self._n_components(values)
        proj = self._scaled(W[:, :d], values[:d])
        coef = proj if self._feature_map is None else self._feature_map @ proj
        self.coef_, self.offset_ = coef, mean @ proj

    def _fit_dual(self, K, L, Lc) -> None:
        """Dual problems: eq. 10 (``K L K u = lambda C^ker u``) or eq. 4 (transductive, K = I)."""
        if self.mode == "transductive":
            A, C = L, (np.eye(len(L)) if Lc is None else Lc)
        else:
            A, C = K @ L @ K, (K if Lc is None else K @ Lc @ K)
        values, vecs = solve.generalized_eigh(A, solve.ridge(C, self.reg_eps), self._method)
        Z = vecs if self.mode == "transductive" else K @ vecs  # training coordinates along each direction
        K_norm = 1.0 if self.mode == "transductive" else float(np.linalg.norm(K, 2))
        values, vecs = self._informative(values, vecs, Z.std(axis=0), np.linalg.norm(vecs, axis=0),
                                         K_norm / np.sqrt(len(vecs)))
        d = self._n_components(values)
        U = self._scaled(vecs[:, :d], values[:d])
        self.coef_, self.offset_ = U, np.zeros(d)
        self._feature_map = None

    def _scaled(self, W, values):
        """``W T`` (T of remark 2, deterministic signs); records ``eigenvalues_`` and ``component_norms_``."""
        self.eigenvalues_, self.component_norms_ = values, np.linalg.norm(W, axis=0)
        return sign_flip(W * solve.scaling_factors(self.component_norms_, values, self.scaling))

    def _informative(self, values, W, spread, norms, scale):
        """Drop candidate directions with no spread over the training points; count them in ``n_null_``."""
        keep = solve.has_spread(spread, norms, scale)
        self.n_null_ = int(np.sum(~keep))
        if not keep.any():
            raise ParameterError(f"{self._method}: every direction leaves the training points at one value")
        return values[keep], W[:, keep]

    def _n_components(self, values: np.ndarray) -> int:
        default = solve.n_negative(values) if self._method == "DNE" else len(self.classes_)
        d = solve.choose_n_components(self.n_components, default, len(values), self._method)
        self.n_components_ = d
        return d

    # ------------------------------------------------------------------ transform
    def transform(self, X) -> np.ndarray:
        """Embed points: ``A x`` (eq. 8) or ``U k(x)`` (eq. 11); shape (n, n_components_)."""
        check_is_fitted(self, "coef_")
        if self.mode == "transductive":
            raise ParameterError("mode='transductive' embeds the training points only: use fit_transform or embedding_")
        X = validate_X(self, X, reset=False)
        F = X if self.basis_ is None else self._kernel(X, self.basis_)
        return F @ self.coef_ - self.offset_

    def fit_transform(self, X, y=None, **fit_params):
        """Fit and return the embedding of every row of ``X`` (equal to ``transform(X)`` when defined)."""
        return self.fit(X, y).embedding_

    def rescaled(self, scaling: str):
        """A copy of this fitted estimator with another T of remark 2, without refitting.

        The optimum is invariant under ``Z -> T Z`` (remark 2), so only the columns of ``coef_``, ``offset_`` and
        ``embedding_`` change: each is multiplied by ``t_new / t_old`` (the diagonals of T, from
        ``component_norms_`` and ``eigenvalues_``). Equal to a refit with ``scaling=scaling``.
        """
        check_is_fitted(self, "coef_")
        check_choice("scaling", scaling, solve.SCALINGS)
        if not hasattr(self, "component_norms_"):
            raise ParameterError("rescaled needs component_norms_, which a model restored by from_state lacks; refit")
        old = solve.scaling_factors(self.component_norms_, self.eigenvalues_, self.scaling)
        if np.any(old == 0):
            raise ParameterError(f"scaling={self.scaling!r} zeroed a component (eigenvalue 0); refit with {scaling!r}")
        factor = solve.scaling_factors(self.component_norms_, self.eigenvalues_, scaling) / old
        est = copy.deepcopy(self)
        est.scaling = scaling
        est.coef_, est.offset_ = self.coef_ * factor, self.offset_ * factor
        if hasattr(self, "embedding_"):
            est.embedding_ = self.embedding_ * factor
        return est

    # ------------------------------------------------------------------ model state
    def to_state(self) -> tuple[dict, dict]:
        """Arrays and JSON attributes needed to embed new points (no pickle)."""
        check_is_fitted(self, "coef_")
        if callable(self.kernel):
            raise ParameterError("to_state needs a named kernel (a callable cannot be stored)")
        arrays = {"coef": self.coef_, "offset": self.offset_, "eigenvalues": self.eigenvalues_,
                  "classes": self.classes_}
        if self.basis_ is not None:
            arrays["basis"] = self.basis_
        attrs = {"method": self._method, "params": {k: v for k, v in self.get_params().items()},
                 "kernel_params": self._kernel_params, "n_features_in": int(self.n_features_in_)}
        return arrays, attrs

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict):
        """Rebuild a fitted estimator written by :meth:`to_state`."""
        if attrs.get("method") != cls._method:
            raise InputDataError(f"model state is for {attrs.get('method')!r}, not {cls._method!r}")
        est = cls(**attrs["params"])
        est.coef_, est.offset_ = np.asarray(arrays["coef"]), np.asarray(arrays["offset"])
        est.eigenvalues_, est.classes_ = np.asarray(arrays["eigenvalues"]), np.asarray(arrays["classes"])
        est.basis_ = np.asarray(arrays["basis"]) if "basis" in arrays else None
        est._kernel, est._kernel_params = resolve_kernel(est.kernel, attrs["kernel_params"])
        est.n_features_in_ = int(attrs["n_features_in"])
        est.n_components_ = est.coef_.shape[1]
        return est


class DNE(_DiscriminantEstimator):
    """(SS-)(K)DNE: ``W^(1) = W^I - W^E``, ``C = I`` (linear) / ``K`` (kernel); CK08 Sect. 2.1.2, 3.1.

    ``n_components=None`` takes the number of negative eigenvalues (Sect. 5, after [9]). See the module
    docstring for the parameters.
    """

    _method = "DNE"


class MFA(_DiscriminantEstimator):
    """(SS-)(K)MFA: ``W^(1) = W^I``, ``C = X (D^E - W^E) X^T`` / ``K (D^E - W^E) K``; ``n_components`` = c."""

    _method = "MFA"


class LFDA(_DiscriminantEstimator):
    """(SS-)(K)LFDA: ``W^(1) = W^bet``, ``C = X (D^wit - W^wit) X^T`` / ``K (D^wit - W^wit) K``; d = c."""

    _method = "LFDA"
