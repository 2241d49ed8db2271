"""Spectral-kernel classifiers of LQCL09: TSK (Sect. 4, learned by the LP of eq. 14) and RSK (Sect. 3).

Both build ``K = V_m U V_m^T`` (eq. 9) on the m retained eigenpairs of ``L = I - D^-1/2 W D^-1/2``, classify
with eq. 5 (``f(x_i) = argmax_k sum_{y_j = k} K_ij``) and extend to new points with eq. 17-19. Only the
spectrum ``U = diag(mu)`` differs: TSK learns it (eq. 14), RSK takes ``theta_t = (1 - alpha) / (1 - alpha +
alpha lambda_t)`` (eq. 4, Zhou et al.'s consistency method as a kernel).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from eigenflow.spectral._validation import check_choice, check_float, check_int, check_labels, clip_int, validate_X
from eigenflow.spectral.errors import InputDataError, KernelFallbackWarning, ParameterError
from eigenflow.spectral.graph.laplacian import check_affinity
from eigenflow.spectral.graph.weights import fit_weight_params, query_weights, weights_from_params
from eigenflow.spectral.methods.spectral_kernels.basis import (EIGEN_SOLVERS, ONE_TOL, SpectralBasis, extend_vectors,
                                                     spectral_basis)
from eigenflow.spectral.methods.spectral_kernels.classifier_state import GraphParams, estimator_state, restore_estimator
from eigenflow.spectral.methods.spectral_kernels.lp import CONSTRAINTS, solve_spectrum_lp
from eigenflow.spectral.methods.spectral_kernels.scores import (class_matrix, class_weight_vector, normalized_propagation,
                                                      score_distributions, transductive_scores)
from eigenflow.spectral.neighbours.index import KNNIndex

#: Candidate neighbours examined per new point (reverse neighbours further than this are missed; see
#: spectral.graph.weights.query_weights).
CANDIDATE_FACTOR = 3
CLASS_WEIGHTS = (None, "balanced")
#: Smallest k of ``n_neighbors="auto"``: the paper's k = 6 (Table 3 datasets, n <= 351, keep it).
MIN_AUTO_NEIGHBORS = 6


def resolve_n_neighbors(n_neighbors, n: int) -> int:
    """k of the kNN graph for ``n`` points: an int as given (clipped to n - 1 with a warning), or ``"auto"`` =
    ``max(6, ceil(ln n))`` capped at n - 1.

    A kNN graph of n random points on a manifold is connected with high probability only when k grows like
    log n (Brito et al. 1997; Balister et al. 2005), so a fixed k fails as n grows: the paper's k = 6 leaves 7
    of the 2e4 points of ``benchmarks/bench_tsk_scale.py``'s Swiss roll in a separate component (an error),
    while ``ceil(ln 2e4)`` = 10 connects it (and ``ceil(ln 1e6)`` = 14). For n <= 403 "auto" is the paper's 6.
    """
    if isinstance(n_neighbors, str) and n_neighbors == "auto":
        return int(min(max(MIN_AUTO_NEIGHBORS, int(np.ceil(np.log(max(n, 2))))), n - 1))
    return clip_int("n_neighbors", n_neighbors, n - 1)


def check_semi_supervised_labels(y, n: int, classes=None, *, estimator: str = "TSK/RSK"
                                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``y`` (n,) with -1 for unlabeled points; return ``(classes, labeled_idx, codes)``.

    scikit-learn's label rules (:func:`spectral._validation.check_labels`: required, 1-D, one per point, a
    classification target; labels of any sortable kind, numeric -1 = unlabeled). ``classes`` (optional) lists
    every class that must have a labeled point (a class without one could never be predicted by eq. 5): a
    missing class raises :class:`InputDataError` naming it.
    """
    y, found, codes = check_labels(y, n, estimator=estimator, semi_supervised=True, min_classes=0)
    labeled = np.flatnonzero(codes >= 0)
    codes = codes[labeled]
    if classes is not None:
        classes = np.unique(np.asarray(classes))
        missing = np.setdiff1d(classes, found)
        if missing.size:
            raise InputDataError(f"every class needs at least one labeled point; no labeled point of class(es) "
                                 f"{missing.tolist()}")
        found, codes = classes, np.searchsorted(classes, y[labeled])
    if found.size < 2:
        raise InputDataError(f"y needs labeled points of at least 2 classes; got {found.size} "
                             f"({labeled.size} labeled points)")
    return found, labeled, codes


class _SpectralKernelClassifier(ClassifierMixin, BaseEstimator):
    """Shared graph, basis, eq. 5 classifier, eq. 17-19 out-of-sample extension and kernel of TSK / RSK."""

    # -- fitting ---------------------------------------------------------------------------------------
    def fit(self, X, y, classes=None):
        """Fit on all points ``X`` (n, d); ``y`` (n,) has class labels >= 0 and -1 for unlabeled points.

        Sets ``transduction_`` (n,), ``scores_`` (n, c) (eq. 5), ``mu_`` (m,), ``eigenvalues_`` (m,),
        ``eigenvectors_`` (n, m), ``class_matrix_`` (m, c) (``scores_ = eigenvectors_ @ class_matrix_``),
        ``classes_``.
        """
        X = validate_X(self, X, min_samples=3)
        n = X.shape[0]
        self.classes_, self.labeled_indices_, codes = check_semi_supervised_labels(y, n, classes,
                                                                                   estimator=type(self).__name__)
        k = resolve_n_neighbors(self.n_neighbors, n)
        self._check_spectrum_params(n)
        index = KNNIndex.build(X, k, method=self.knn_method, random_state=self.random_state)
        idx, dist = index.neighbor_graph()
        params, scales, radii = fit_weight_params(dist, weighting="hein_maier", symmetrize="or")  # eq. 2
        W = weights_from_params(idx, dist, params, scales)
        self._index, self._graph = index, GraphParams(params, scales, radii, index.params)
        return self._fit_graph(W, codes)

    def fit_graph(self, W, y, classes=None):
        """Fit on a precomputed affinity ``W`` (n, n) instead of data (no out-of-sample ``predict`` then)."""
        W = check_affinity(W)
        self.classes_, self.labeled_indices_, codes = check_semi_supervised_labels(y, W.shape[0], classes)
        self._check_spectrum_params(W.shape[0])
        self._index, self._graph = None, None
        return self._fit_graph(W, codes)

    def fit_basis(self, basis: SpectralBasis, y, classes=None, *, graph: GraphParams | None = None,
                  n_features_in: int | None = None):
        """Fit on a precomputed :class:`SpectralBasis` of n points (the at-scale path of the flows).

        ``basis`` must come from :func:`spectral_basis` with this estimator's ``n_components`` and
        ``include_trivial``; ``y`` (n,) as in :meth:`fit`. ``graph`` (the eq. 2 weighting of the training
        graph) enables the out-of-sample extension once an index is attached (:meth:`rebuild_index`).
        """
        n = basis.vectors.shape[0]
        self.classes_, self.labeled_indices_, codes = check_semi_supervised_labels(y, n, classes)
        self._check_spectrum_params(n)
        if basis.values.shape != (self._n_basis(n),) or basis.degrees.shape != (n,):
            raise InputDataError(f"basis must hold {self._n_basis(n)} eigenpairs and n={n} degrees; got "
                                 f"{basis.values.shape[0]} pairs and {basis.degrees.shape[0]} degrees")
        if graph is not None and graph.scales.shape != (n,):
            raise InputDataError(f"graph scales must have shape ({n},); got {graph.scales.shape}")
        self._index, self._graph = None, graph
        if n_features_in is not None:
            self.n_features_in_ = check_int("n_features_in", n_features_in, low=1)
        return self._fit_basis(basis, codes)

    def _fit_graph(self, W, codes: np.ndarray):
        basis = spectral_basis(W, self._n_basis(W.shape[0]), include_trivial=self._include_trivial(),
                               eigen_solver=self.eigen_solver, random_state=self.random_state,
                               skip_one=self._skip_one())
        return self._fit_basis(basis, codes)

    def _fit_basis(self, basis: SpectralBasis, codes: np.ndarray):
        self.eigenvalues_, self.eigenvectors_, self.degrees_ = basis.values, basis.vectors, basis.degrees
        self.basis_info_ = basis.info
        self.mu_ = self._learn_spectrum(basis, codes)
        self.class_matrix_ = class_matrix(basis.vectors[self.labeled_indices_], codes, self.mu_,
                                          self.classes_.size, class_weight_vector(self.class_weight, self.classes_))
        self._set_transductive_outputs()
        return self

    def _set_transductive_outputs(self) -> None:
        self.scores_ = self.eigenvectors_ @ self.class_matrix_  # eq. 5 for every training point
        self.transduction_ = self.classes_[np.argmax(self.scores_, axis=1)]
        self.label_distributions_ = score_distributions(self.scores_)

    # -- model state (spectral.methods.spectral_kernels.classifier_state) ------------------------------------------
    def to_state(self) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, attrs)``: numeric arrays and JSON-able attributes (no pickle, no kNN index)."""
        check_is_fitted(self, "mu_")
        if self.classes_.dtype.kind not in "biuf":
            raise InputDataError(f"to_state stores numeric class labels only; got dtype {self.classes_.dtype}")
        return estimator_state(self)

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict):
        """Inverse of :meth:`to_state`; call :meth:`rebuild_index` (or :meth:`attach_index`) before ``predict``."""
        return restore_estimator(cls, arrays, attrs)

    def attach_index(self, index: KNNIndex) -> None:
        """Use an already built kNN index of the n training points (for eq. 17-19)."""
        check_is_fitted(self, "mu_")
        self._check_out_of_sample()
        n = self.eigenvectors_.shape[0]
        if index.n_samples != n:
            raise InputDataError(f"the index has {index.n_samples} points; the model was fitted on {n}")
        self._index = index

    def rebuild_index(self, X_train) -> None:
        """Rebuild the kNN index from the training points ``X_train`` (n, d), same rows and order as at fit."""
        check_is_fitted(self, "mu_")
        self._check_out_of_sample()
        self.attach_index(KNNIndex.rebuild(X_train, self._graph.knn_params))

    def _check_out_of_sample(self) -> None:
        if self._graph is None:
            raise ParameterError("this model has no kNN graph parameters (fitted from a graph): out-of-sample "
                                 "needs fit(X, y)")

    def _include_trivial(self) -> bool:
        return True

    def _skip_one(self) -> bool:
        return True

    # -- eq. 17-19 --------------------------------------------------------------------------------------
    def spectral_rows(self, X, n_candidates=None) -> np.ndarray:
        """Rows ``V_x`` (s, m) of the eigenvector matrix for points ``X`` (s, d) (eq. 18).

        A point equal to a training point gets that point's training row (what eq. 18 gives for it,
        Theorem 2); others use the weights of eq. 2 to the training graph, found among their
        ``n_candidates`` nearest training points (default ``3 k``; a training point further away that would
        still count x among its k neighbours is missed, see :func:`spectral.graph.weights.query_weights`; pass n
        for the exact eq. 17).
        """
        idx, dist, exact = self._candidates(X, n_candidates)
        out = np.empty((idx.shape[0], self.eigenvectors_.shape[1]))
        out[exact] = self.eigenvectors_[idx[exact, 0]]
        rest = np.flatnonzero(~exact)
        if rest.size:
            out[rest] = self.extend(idx[rest], dist[rest])
        return out

    def _candidates(self, X, n_candidates=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Candidate training neighbours ``(indices (s, kc), distances (s, kc), exact (s,) bool)`` of new points
        ``X`` (s, d); ``exact`` marks points equal to their first candidate (a training point)."""
        check_is_fitted(self, "mu_")
        self._check_out_of_sample()
        if self._index is None:
            raise ParameterError("this model has no kNN index (restored from a state): call "
                                 "rebuild_index(X_train) first")
        X = validate_X(self, X, reset=False)
        n = self.eigenvectors_.shape[0]
        k = self._graph.weight_params.n_neighbors
        kc = check_int("n_candidates", CANDIDATE_FACTOR * k if n_candidates is None else n_candidates, low=k)
        idx, dist = self._index.query(X, min(n, kc))
        return idx, dist, dist[:, 0] == 0.0

    def extend(self, indices, distances) -> np.ndarray:
        """Eq. 18 for new points given their candidate training neighbours ``(indices, distances)`` (s, kc)."""
        keep = np.abs(1.0 - self.eigenvalues_) > ONE_TOL  # all True unless an RSK basis kept lambda = 1
        g = self._graph
        Wq, shift = query_weights(indices, distances, g.weight_params, g.scales, g.radii, return_log_scale=True)
        out = np.zeros((Wq.shape[0], self.eigenvalues_.size))
        out[:, keep] = extend_vectors(Wq, self.degrees_, self.eigenvalues_[keep], self.eigenvectors_[:, keep],
                                      log_scale=shift)
        return out

    def class_scores(self, X) -> np.ndarray:
        """Eq. 19 scores (s, c): ``sum_{y_j = k} K(x, x_j)`` for new points ``X`` (s, d), one column per class."""
        return self.spectral_rows(X) @ self.class_matrix_

    def decision_function(self, X) -> np.ndarray:
        """scikit-learn's decision function of new points ``X`` (s, d): :meth:`class_scores` (s, c), or for two
        classes the (s,) difference of the :meth:`predict_proba` columns, ``p_1 - p_0`` in [-1, 1] (> 0
        predicts ``classes_[1]``; ranked as ``p_1``, as scikit-learn's binary classifiers)."""
        scores = self.class_scores(X)
        if scores.shape[1] != 2:
            return scores
        P = score_distributions(scores)
        return P[:, 1] - P[:, 0]

    def predict(self, X) -> np.ndarray:
        """Labels (s,) of new points by eq. 19 (out-of-sample extension)."""
        check_is_fitted(self, "mu_")
        return self.classes_[np.argmax(self.class_scores(X), axis=1)]

    def predict_proba(self, X) -> np.ndarray:
        """Class distributions (s, c) of new points: :func:`score_distributions` of :meth:`class_scores`, as
        LabelSpreading's normalized label distributions (``label_distributions_`` for the training points).
        ``argmax`` gives :meth:`predict`. Not calibrated probabilities (a ranking per point)."""
        check_is_fitted(self, "mu_")
        return score_distributions(self.class_scores(X))

    # -- the kernel -------------------------------------------------------------------------------------
    def kernel_features(self, X=None) -> np.ndarray:
        """``Phi^T`` rows (s, m) with ``K(x, z) = phi_x . phi_z`` (eq. 9-10, 16): ``V_x U^1/2``.

        ``X=None`` gives the training points (n, m).
        """
        check_is_fitted(self, "mu_")
        rows = self.eigenvectors_ if X is None else self.spectral_rows(X)
        return rows * np.sqrt(self.mu_)[None, :]

    def kernel(self, X=None, Y=None) -> np.ndarray:
        """Learned kernel ``K(X, Y)`` (s_x, s_y), PSD (Theorem 2), e.g. for ``SVC(kernel="precomputed")``.

        ``None`` stands for the n training points: ``kernel()`` is the (n, n) TSK matrix, ``kernel(X_new)``
        the (s, n) rows of new points against the training points (eq. 16-18), ``kernel(X_new, X_new)`` the
        (s, s) block among new points.
        """
        Fx = self.kernel_features(X)
        Fy = Fx if (Y is None and X is None) else self.kernel_features(Y)
        return Fx @ Fy.T


class TSK(_SpectralKernelClassifier):
    """Transductive spectral kernel (LQCL09, Sect. 4 and Table 1) with its eq. 5 classifier.

    Parameters
    ----------
    n_components : int, default 30
        m, the number of smallest eigenpairs (lambda != 1) of the normalized Laplacian.
    eta : float >= 1, default 1.0
        Decay factor of eq. 8 (``mu_t >= eta mu_{t+1}``). The paper's experiments use 2 (Table 3; pass it to
        reproduce them). The default 1 keeps eq. 8 as a monotone spectrum ``mu_1 >= mu_2 >= ...``: without it
        the LP's optimum is a vertex with two nonzero mu (a rank-2 kernel that cannot separate more than a
        few classes), and with eta = 2 the trivial eigenvector takes the largest weight and the optimum is
        mu = 0 for c > 2 classes; with eta = 1 the LP keeps most of the m pairs, a low-pass projection of the
        class indicators, which scores better than eta = 2 on Table 3's datasets too
        (``benchmarks/results/tsk.md``, "TSK at scale", records the accuracies).
    beta : float > 0 or "auto", default "auto"
        Hinge weight of eq. 11/14. "auto" = n / l (points per labeled point): the unit-norm eigenvectors have
        entries of size n^-1/2, so a class-aligned column of ``G`` is of size l / n and meeting the margin costs
        about ``lambda_t n / l``; with beta = n / l a slack unit is worth removing exactly for the smooth pairs
        (lambda_t < 1). The paper does not state its beta.
    n_neighbors : int or "auto", default "auto"
        k of the kNN graph (eq. 2); "auto" = ``max(6, ceil(ln n))`` (:func:`resolve_n_neighbors`: the paper's
        6 up to n = 403, then growing as the connectivity of kNN graphs needs).
    constraint : {"decay", "none"}, default "decay"
        "decay" imposes eq. 8 as printed; "none" keeps only mu >= 0 (see benchmarks/results/tsk.md:
        the reproduction of Table 3 on Ionosphere and Sonar needs it).
    include_trivial : bool, default True
        Keep lambda_1 = 0 among the m pairs (the paper's Table 1 does).
    class_weight : None, "balanced" or dict {class: weight >= 0}
        None: eq. 5 as printed (class sums); "balanced": class means; a dict multiplies each class's sum
        (classes not listed: 1).
    eigen_solver, knn_method : str
        Passed to :func:`spectral.eigen.eigensolve` and :class:`spectral.neighbours.index.KNNIndex`.
    random_state : None, int or Generator

    Attributes
    ----------
    mu_ (m,), xi_ (l,), lp_objective_, beta_, eigenvalues_ (m,), eigenvectors_ (n, m), degrees_ (n,),
    classes_ (c,), labeled_indices_ (l,), class_matrix_ (m, c), transduction_ (n,), scores_ (n, c),
    label_distributions_ (n, c) (:func:`score_distributions` of ``scores_``), n_features_in_,
    fallback_kernel_ (None, or the kernel used when the LP's optimum is mu = 0: ``"rsk(alpha=0.99)"``, RSK's
    spectrum on the same eigenpairs, with a :class:`~spectral.errors.KernelFallbackWarning`).

    A fitted model is saved with :meth:`to_state` (plain arrays + JSON attributes) and restored with
    :meth:`from_state` followed by :meth:`rebuild_index` (the training points) for out-of-sample use.
    """

    def __init__(self, n_components=30, *, eta=1.0, beta="auto", n_neighbors="auto", constraint="decay",
                 include_trivial=True, class_weight=None, eigen_solver="auto", knn_method="auto",
                 random_state=None):
        self.n_components = n_components
        self.eta = eta
        self.beta = beta
        self.n_neighbors = n_neighbors
        self.constraint = constraint
        self.include_trivial = include_trivial
        self.class_weight = class_weight
        self.eigen_solver = eigen_solver
        self.knn_method = knn_method
        self.random_state = random_state

    def _check_spectrum_params(self, n: int) -> None:
        self._m = clip_int("n_components", self.n_components, max(1, n - 2), bound="n_samples - 2")
        check_float("eta", self.eta, low=1.0)
        if not (isinstance(self.beta, str) and self.beta == "auto"):
            check_float("beta", self.beta, low=0.0, low_inclusive=False)
        check_choice("constraint", self.constraint, CONSTRAINTS)
        check_choice("eigen_solver", self.eigen_solver, EIGEN_SOLVERS)
        _check_class_weight(self.class_weight)
        if not isinstance(self.include_trivial, (bool, np.bool_)):
            raise ParameterError(f"include_trivial must be a bool; got {self.include_trivial!r}")

    def _n_basis(self, n: int) -> int:
        return self._m

    def _include_trivial(self) -> bool:
        return bool(self.include_trivial)

    def _learn_spectrum(self, basis: SpectralBasis, codes: np.ndarray) -> np.ndarray:
        n, l = basis.vectors.shape[0], codes.size
        self.beta_ = n / l if isinstance(self.beta, str) else float(self.beta)
        lp = solve_spectrum_lp(basis.values, basis.vectors[self.labeled_indices_], codes, eta=float(self.eta),
                               beta=self.beta_, constraint=self.constraint, allow_zero=True)
        self.xi_, self.lp_objective_ = lp.xi, lp.objective
        self.fallback_kernel_ = None
        if np.any(lp.mu > 0):
            return lp.mu
        # the zero spectrum: every eq. 5 score would tie. Fall back to RSK's spectrum on the same basis.
        self.fallback_kernel_ = f"rsk(alpha={FALLBACK_ALPHA})"
        warnings.warn(KernelFallbackWarning(
            f"the TSK linear program's optimum is mu = 0 (beta={self.beta_:g}, constraint={self.constraint!r}, "
            f"{l} labeled points): no learned spectrum beats paying the slacks, so the kernel would be zero. "
            f"Using the fallback kernel {self.fallback_kernel_!r} on the same eigenpairs, theta_t = (1 - alpha) / "
            f"(1 - alpha + alpha lambda_t) (LQCL09 eq. 4; recorded in fallback_kernel_). A larger beta, "
            f"constraint='none' or include_trivial=False may let the LP learn one"), stacklevel=3)
        return rsk_spectrum(basis.values, FALLBACK_ALPHA)


class RSK(_SpectralKernelClassifier):
    """Regularized spectral kernel (LQCL09, Sect. 3): ``K_r = V Theta V^T``, Zhou et al.'s method as a kernel.

    ``theta_t = (1 - alpha) / (1 - alpha + alpha lambda_t)`` (eq. 4). With ``n_components=None`` every
    eigenpair is used (dense, n <= :data:`RSK_DENSE_MAX_N`) and the transductive scores equal Zhou et al.'s
    ``(1 - alpha)(I - alpha S)^-1 C``; an integer keeps the m smallest pairs (the at-scale form). Out-of-sample:
    with an integer ``n_components`` eq. 18-19 on the pairs with lambda != 1 (Theorem 2); with None the
    propagation step of :meth:`class_scores` (eq. 18 would divide by ``1 - lambda <= 0`` for the
    high-frequency half of the full spectrum). Other parameters (``n_neighbors="auto"`` included) and
    attributes as :class:`TSK`.

    Default ``n_components=30`` (as TSK): the full spectrum is a dense eigh and refuses n > 3,000. Pass
    ``n_components=None`` for Zhou et al.'s exact transduction (the reproduction does).
    """

    def __init__(self, alpha=0.99, *, n_components=30, n_neighbors="auto", class_weight=None, eigen_solver="auto",
                 knn_method="auto", random_state=None):
        self.alpha = alpha
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.class_weight = class_weight
        self.eigen_solver = eigen_solver
        self.knn_method = knn_method
        self.random_state = random_state

    def _check_spectrum_params(self, n: int) -> None:
        check_float("alpha", self.alpha, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        if self.n_components is None:
            if n > RSK_DENSE_MAX_N:
                raise ParameterError(f"n_components=None (full spectrum) needs n <= {RSK_DENSE_MAX_N}; got "
                                     f"n={n}: pass an integer n_components")
            self._m = n
        else:
            self._m = clip_int("n_components", self.n_components, max(1, n - 2), bound="n_samples - 2")
        check_choice("eigen_solver", self.eigen_solver, EIGEN_SOLVERS)
        _check_class_weight(self.class_weight)

    def _n_basis(self, n: int) -> int:
        return self._m

    def _skip_one(self) -> bool:
        return self.n_components is not None

    def _learn_spectrum(self, basis: SpectralBasis, codes: np.ndarray) -> np.ndarray:
        return rsk_spectrum(basis.values, float(self.alpha))

    def class_scores(self, X) -> np.ndarray:
        """Scores (s, c) of new points ``X`` (s, d), one column per class.

        Integer ``n_components``: eq. 19 with the eq. 18 rows (as :class:`TSK`). ``n_components=None`` (all n
        pairs): eq. 18 divides by ``1 - lambda_t``, which is near 0 or negative for the high-frequency half of
        a full spectrum (lambda_t in (1, 2]): it amplifies noise and flips signs (held-out accuracy at chance).
        A new point is instead appended as an unlabeled node of Zhou et al.'s iteration ``F = alpha S F + (1 -
        alpha) Y`` with the training scores frozen: ``F(x) = alpha sum_i S(x, x_i) F_i``, ``S(x, x_i) =
        W(x, x_i) / sqrt(D_xx D_ii)`` (the fixed point that the full spectrum solves exactly; LabelSpreading's
        predict is the same one-step propagation). A point equal to a training point gets its ``scores_`` row.
        """
        if self.n_components is not None:
            return super().class_scores(X)
        idx, dist, exact = self._candidates(X)
        out = np.empty((idx.shape[0], self.classes_.size))
        out[exact] = self.scores_[idx[exact, 0]]
        rest = np.flatnonzero(~exact)
        if rest.size:
            g = self._graph
            Wq, shift = query_weights(idx[rest], dist[rest], g.weight_params, g.scales, g.radii,
                                      return_log_scale=True)
            out[rest] = float(self.alpha) * normalized_propagation(Wq, self.degrees_, self.scores_, shift)
        return out


def rsk_spectrum(values: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 4: ``theta_t = (1 - alpha) / (1 - alpha + alpha lambda_t)`` (m,) for eigenvalues ``values`` (m,)."""
    return (1.0 - alpha) / (1.0 - alpha + alpha * np.asarray(values, dtype=np.float64))


#: TSK's fallback spectrum when its LP's optimum is mu = 0: RSK's with Zhou et al.'s alpha (RSK's default).
FALLBACK_ALPHA = 0.99

#: Largest n for RSK's full spectrum (dense eigh of an n x n matrix: O(n^3) time, O(n^2) memory).
RSK_DENSE_MAX_N = 3000


def _check_class_weight(value) -> None:
    if value is not None and not (isinstance(value, str) and value == "balanced") and not isinstance(value, dict):
        raise ParameterError(f"class_weight must be one of {list(CLASS_WEIGHTS)} or a {{class: weight}} dict; "
                             f"got {value!r}")
