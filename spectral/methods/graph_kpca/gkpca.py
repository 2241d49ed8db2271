"""GraphKPCA: graph-regularized kernel PCA of STG18 (eq. 13, 14, 22-24), dense and at scale.

The embedding Psi^T = V (n, d) holds the d leading eigenvectors of

    K_bar = H K_y H - gamma L_G                      (eq. 13, laplacian regularizer), or
    K_bar = H K_y H + gamma r^dagger(L_G)            (eq. 14, graph kernel),
    ... - gamma_must L^S + gamma_cannot L^D          (eq. 24, must-link / cannot-link graphs),

with H = I - 11^T/n (kernel PCA centering). gamma = 0 is kernel PCA; the linear kernel gives (dual) PCA.

Out-of-sample extension (derived here; the paper has none). Row i of K_bar V = V Lambda reads
lambda v_i = k_c(x_i)^T V + [graph row i] V. A new point x is appended to the graph as a node with its
kNN weights a(x) (n,) to the training points, keeping the training embedding fixed:

- eq. 13, L = D - A:  lambda v(x) = k_c(x)^T V + gamma a(x)^T V - gamma d(x) v(x)
                      =>  v(x) = (k_c(x)^T V + gamma a(x)^T V) / (lambda + gamma d(x)),  d(x) = sum a(x);
- eq. 13, L = I - D^-1/2 A D^-1/2:  v(x) = (k_c(x)^T V + gamma sum_j a_j / sqrt(d(x) d_j) v_j) / (lambda + gamma);
- eq. 14: the row of r^dagger(L) of a new node is approximated by the a(x)-weighted mean of its
  neighbours' rows: v(x) = (k_c(x)^T V + gamma (a(x) / d(x))^T r^dagger(L) V) / lambda;
- a user graph or constraint graphs carry no row for an unseen point (an isolated node): v(x) =
  k_c(x)^T V / lambda, the kernel PCA projection.

A query point equal to a training point IS that node: it gets its training row (so transform(X_train)
reproduces the fit exactly). k_c(x) is centered with the training statistics (scikit-learn KernelCenterer).

At scale (solver="nystrom"): K_y ~= Phi Phi^T with Nystrom features, centered column-wise (= H K H), the
eigen-step runs on the implicit operator Phi Phi^T + sparse graph terms (+ U g U^T, the low end of L's
spectrum for eq. 14): no n x n array is formed.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from eigenflow.spectral._transformer import EmbeddingTransformerMixin
from eigenflow.spectral._validation import check_choice, check_float, check_random_state, clip_int, validate_X
from eigenflow.spectral.eigen import OPERATOR_SOLVERS, eigensolve
from eigenflow.spectral.errors import InputDataError
from eigenflow.spectral.graph.laplacian import laplacian
from eigenflow.spectral.methods.graph_kpca import graphs as G
from eigenflow.spectral.methods.graph_kpca._core import KNN_METHOD, top_eigs_dense, training_index
from eigenflow.spectral.methods.graph_kpca.graph_kernels import dense_graph_kernel, graph_kernel_params, lowrank_graph_kernel
from eigenflow.spectral.methods.graph_kpca.multi_nystrom import nystrom_map
from eigenflow.spectral.neighbours.index import KNNIndex, check_knn_graph
from eigenflow.spectral.operators.kernels import center_gram, center_rows, kernel_from_params
from eigenflow.spectral.operators.linear import LowRankOperator, ScaledSum, SparseOperator
from eigenflow.spectral.operators.nystrom_features import NystromFeatures

SOLVERS = ("dense", "nystrom")
#: gamma_must = gamma_cannot = "auto": this weight (the paper's 0.5) divided by the largest constraint degree
AUTO_CONSTRAINT_WEIGHT = 0.5
SCALINGS = ("unit", "sqrt_eigenvalue")
#: |lambda| <= this * max |lambda| is a numerically zero eigenvalue (KernelPCA's float64 ratio)
NULL_EIG_RTOL = 1e-12


class GraphKPCA(EmbeddingTransformerMixin, BaseEstimator):
    """Graph-adaptive kernel PCA (STG18 eq. 13/14/24), scikit-learn API.

    Parameters
    ----------
    n_components : int, the embedding dimension d, in [1, n_samples] (solver="dense"; [1, n_samples - 1] for
        "nystrom"); a larger value is clipped with a ParameterAdjustedWarning. As in KernelPCA, a component
        whose eigenvalue is numerically zero (``|lambda| <= 1e-12 max |lambda|``) and whose extension has no
        kNN-graph term is a column of zeros in ``embedding_`` and ``transform`` (its eigenvalue is set to 0).
    kernel : {"rbf", "linear", "poly", "cosine", "laplacian", "sigmoid"}; kernel_params : dict of
        scikit-learn kernel parameters (gamma, degree, coef0) (e.g. {"gamma": 1 / (2 sigma^2)} for rbf).
    gamma : float >= 0, weight of the graph term (0 gives kernel PCA).
    graph : "knn" (kNN graph built from X), None (no data graph), or an (n, n) symmetric non-negative
        adjacency (scipy.sparse or ndarray) given by the user, one node per sample.
    n_neighbors, graph_weight ("gaussian" | "cosine" | "binary"), graph_sigma : the kNN data graph;
        precomputed_knn : None or (indices (n, k), distances (n, k)) of the training points (no self),
        e.g. from :func:`spectral.neighbours.knn.knn_graph` at scale, used instead of the exact search.
    laplacian : "unnormalized" (D - A) | "symmetric" (I - D^-1/2 A D^-1/2).
    graph_kernel : None (eq. 13) or one of "regularized", "diffusion", "random_walk", "cosine",
        "bandlimited" (eq. 14); graph_kernel_params : dict with keys s, a, p, cutoff.
    must_link, cannot_link : int arrays (p, 2) of constraint pairs (eq. 22-23); labels passed to
        ``fit(X, y)`` (-1 = unlabeled) add all pairs among labeled points.
    gamma_must, gamma_cannot : float >= 0 or "auto", gamma_1 and gamma_2 of eq. 24. "auto" (default) =
        0.5 / (largest degree of the must-link + cannot-link graphs), i.e. the paper's 0.5 (Sect. 5: two
        USPS digits, which the reproduction passes explicitly) per constraint of the most constrained point.
        The constraint Laplacians' eigenvalues grow with the number of labeled points while the kernel's stay
        O(1) per point, so a fixed 0.5 lets them dominate once there are many classes: the top eigenvectors
        are then class contrasts supported on the labeled points only, and the unlabeled points are embedded
        worse than by kernel PCA. With two classes the strong constraints help: pass 0.5 there
        (``benchmarks/results/defaults_vs_tuned.md`` records both settings on USPS, COIL-20 and Ionosphere).
        The resolved values are ``gamma_must_`` / ``gamma_cannot_``.
    scaling : "unit" (Psi Psi^T = I, the paper's Lambda_d = I) | "sqrt_eigenvalue" (kernel PCA's V
        Lambda^1/2; needs positive eigenvalues).
    solver : "dense" (eigh on K_bar, n up to a few thousand) | "nystrom" (implicit operator).
    n_landmarks : int, Nystrom landmarks (solver="nystrom", :class:`spectral.operators.nystrom_features.NystromFeatures`);
        nystrom_rank : None or int, keep the r leading eigenpairs of K_ZZ (Phi is (n, r)); n_graph_eigs :
        int, smallest eigenpairs of L kept for a graph kernel at scale.
    eigen_solver : "arpack" | "lobpcg" | "randomized", the solver of :func:`spectral.eigen.eigensolve`
        for the implicit operator (solver="nystrom"); tol : its absolute residual tolerance (None: its
        default). random_state : the one seed entry point.

    Attributes
    ----------
    embedding_ (n, d), eigenvalues_ (d,), eigenvectors_ (n, d) unit-norm V, graph_ (csr (n, n) or None).
    """

    def __init__(self, n_components=2, *, kernel="rbf", kernel_params=None, gamma=1.0, graph="knn",
                 n_neighbors=10, precomputed_knn=None, graph_weight="gaussian", graph_sigma=None, laplacian="unnormalized",
                 graph_kernel=None, graph_kernel_params=None, must_link=None, cannot_link=None,
                 gamma_must="auto", gamma_cannot="auto", scaling="unit", solver="dense", n_landmarks=1000,
                 nystrom_rank=None, n_graph_eigs=50, eigen_solver="arpack", tol=None, random_state=None):
        self.n_components, self.kernel, self.kernel_params, self.gamma = n_components, kernel, kernel_params, gamma
        self.graph, self.n_neighbors, self.precomputed_knn = graph, n_neighbors, precomputed_knn
        self.graph_weight, self.graph_sigma, self.laplacian = graph_weight, graph_sigma, laplacian
        self.graph_kernel, self.graph_kernel_params, self.must_link = graph_kernel, graph_kernel_params, must_link
        self.cannot_link, self.gamma_must, self.gamma_cannot = cannot_link, gamma_must, gamma_cannot
        self.scaling, self.solver, self.n_landmarks, self.nystrom_rank = scaling, solver, n_landmarks, nystrom_rank
        self.n_graph_eigs, self.eigen_solver, self.tol = n_graph_eigs, eigen_solver, tol
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Fit on X (n, D); y (n,) optional labels, -1 = unlabeled, turned into constraint pairs."""
        X = validate_X(self, X, min_samples=3)
        n = X.shape[0]
        self._check_params()
        # as KernelPCA: up to n components with dense eigh; the iterative solvers need k < n
        d = (clip_int("n_components", self.n_components, n, bound="n_samples") if self.solver == "dense" else
             clip_int("n_components", self.n_components, n - 1, bound="n_samples - 1"))
        rng = check_random_state(self.random_state)
        self.X_fit_ = X.copy()
        self.knn_index_ = None
        sparse_part, lowrank, R_dense = self._graph_terms(X, y, n, rng)
        if self.knn_index_ is None:  # no kNN search at fit: an index for transform (matches, new rows)
            self.knn_index_ = training_index(X)
        if self.solver == "dense":
            Kc, self._k_col, self._k_tot = center_gram(self._kernel()(X, X))
            if sparse_part is not None:
                Kc += sparse_part.toarray()
            if R_dense is not None:
                Kc += self.gamma * R_dense
            lam, V = top_eigs_dense(Kc, d)
        else:
            self.nystrom_ = self._fit_nystrom(X, rng)
            Phi = self.nystrom_.transform(X)  # (n, r)
            self._phi_mean = Phi.mean(axis=0)
            Phi -= self._phi_mean  # column centering of Phi = H K H
            lam, V = self._eigs_implicit(Phi, sparse_part, lowrank, n, d, rng)
            self._PtV = Phi.T @ V  # (r, d): k_c(x)^T V = (phi(x) - mean) @ PtV
        lam = np.where(self._null_columns(lam), 0.0, lam)
        if R_dense is not None:
            self._RV = R_dense @ V
        elif lowrank is not None:
            U, g = lowrank
            self._RV = U @ (g[:, None] * (U.T @ V))
        self.eigenvalues_, self.eigenvectors_ = lam, V
        self.embedding_ = V * self._scale(lam)
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X, y).embedding_

    def _check_params(self):
        check_choice("solver", self.solver, SOLVERS)
        check_choice("eigen_solver", self.eigen_solver, OPERATOR_SOLVERS)
        check_choice("scaling", self.scaling, SCALINGS)
        check_float("gamma", self.gamma, low=0.0)
        for name in ("gamma_must", "gamma_cannot"):
            value = getattr(self, name)
            if not (isinstance(value, str) and value == "auto"):
                check_float(name, value, low=0.0)
        check_choice("laplacian", self.laplacian, G.LAPLACIANS)
        if self.graph_kernel is not None:
            self._gk_params = graph_kernel_params(self.graph_kernel, self.graph_kernel_params)

    def _graph_terms(self, X, y, n, rng):
        """Returns (sparse additive part (n, n) or None, low-rank (U, g) or None, dense r^dagger or None)."""
        self.graph_, self._kind = None, "none"
        A = None
        if isinstance(self.graph, str):
            check_choice("graph", self.graph, ("knn",))
            if self.precomputed_knn is None:  # one search: the index's own graph, the index kept for transform
                k = clip_int("n_neighbors", self.n_neighbors, n - 1)
                self.knn_index_ = KNNIndex.build(X, k, method=KNN_METHOD)
                ind, dist = self.knn_index_.neighbor_graph()
            else:  # e.g. the NN-descent graph of spectral.neighbours.knn stored by the flow
                ind, dist = check_knn_graph(*self.precomputed_knn, n_samples=n)
            self.n_neighbors_ = ind.shape[1]
            self.sigma_ = (G.default_sigma(dist) if self.graph_sigma is None else self.graph_sigma)
            A = G.knn_adjacency(X, ind, dist, weight=self.graph_weight, sigma=self.sigma_)
            self._kind = "knn"
        elif self.graph is not None:
            A = G.check_user_graph(self.graph, n)
            self._kind = "user"
        sparse_part, lowrank, R_dense = self._constraint_part(X, y, n), None, None
        if A is not None and self.gamma > 0:
            self.graph_ = A
            L, self.degrees_ = laplacian(A, self.laplacian)
            if self.graph_kernel is None:  # eq. 13
                sparse_part = -self.gamma * L if sparse_part is None else sparse_part - self.gamma * L
            elif self.solver == "dense":  # eq. 14
                R_dense = dense_graph_kernel(L, self.graph_kernel, self._gk_params)
            else:
                U, g = lowrank_graph_kernel(L, self.graph_kernel, self._gk_params, self.n_graph_eigs,
                                            random_state=G_seed(rng))
                lowrank = (U, self.gamma * g)
        elif A is not None:
            self.graph_ = A
            self.degrees_ = np.asarray(A.sum(axis=1)).ravel()
        return sparse_part, lowrank, R_dense

    def _constraint_part(self, X, y, n):
        must, cannot = self.must_link, self.cannot_link
        if y is not None:
            y = np.asarray(y)
            if y.dtype == object:
                raise InputDataError("Unknown label type: y must be integer labels (-1 = unlabeled); got dtype object")
            if y.shape == (n,) and np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0):
                y = y.astype(np.int64)  # integral float labels (e.g. read from a float column)
            if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
                raise InputDataError(f"y must be an integer array of shape ({n},) with -1 = unlabeled; got "
                                     f"{y.dtype} shape {y.shape}")
            s, c = G.pairs_from_labels(y)
            must = s if must is None else np.vstack([np.asarray(must).reshape(-1, 2), s])
            cannot = c if cannot is None else np.vstack([np.asarray(cannot).reshape(-1, 2), c])
        if must is None and cannot is None:
            self.gamma_must_ = self.gamma_cannot_ = None
            return None
        AS, AD = G.constraint_graphs(n, must, cannot)
        LS, dS = laplacian(AS)
        LD, dD = laplacian(AD)
        top = max(1.0, float(np.max(np.asarray(dS) + np.asarray(dD))))  # largest number of constraints of a point
        self.gamma_must_, self.gamma_cannot_ = (
            AUTO_CONSTRAINT_WEIGHT / top if isinstance(g, str) else float(g) for g in (self.gamma_must, self.gamma_cannot))
        return (-self.gamma_must_ * LS + self.gamma_cannot_ * LD).tocsr()  # eq. 24

    def _eigs_implicit(self, Phi, sparse_part, lowrank, n, d, rng):
        """d largest eigenpairs of Phi Phi^T + S + U diag(g) U^T as an implicit operator (no n x n array)."""
        ops = [LowRankOperator(Phi)]
        if sparse_part is not None:
            ops.append(SparseOperator(sparse_part))
        if lowrank is not None:
            U, g = lowrank
            ops.append(LowRankOperator(U * np.sqrt(g)))  # g >= 0 for every graph kernel
        op = ScaledSum(ops, [1.0] * len(ops))
        res = eigensolve(op, d, which="largest", solver=self.eigen_solver, tol=self.tol,
                         random_state=G_seed(rng))
        self.eigen_info_ = {"solver": res.solver, "n_iter": res.n_iter, "residuals": res.residuals}
        return res.values, res.vectors

    def _null_columns(self, lam):
        """(d,) bool: the components whose eigenvalue is numerically zero (``|lambda| <= NULL_EIG_RTOL *
        max |lambda|``) while the out-of-sample denominator is lambda alone (no kNN-graph term of eq. 13).

        As KernelPCA (which sets such eigenvalues to 0), these columns are 0 in the embedding and in
        ``transform``: their eigenvectors are an arbitrary basis of a null space, and ``k_c(x)^T V / lambda``
        is undefined.
        """
        graph_term = self._kind == "knn" and self.gamma > 0 and self.graph_kernel is None
        return _numerically_zero(lam) & (not graph_term)

    def _scale(self, lam):
        """(d,) column scale of the embedding: 1 ("unit") or sqrt(lambda) ("sqrt_eigenvalue"), 0 on null columns."""
        null, tiny = self._null_columns(lam), _numerically_zero(lam)
        if self.scaling == "unit":
            scale = np.ones_like(lam, dtype=np.float64)
        else:
            if np.any((lam < 0) & ~tiny):
                raise InputDataError(f"scaling='sqrt_eigenvalue' needs non-negative eigenvalues; got {lam}")
            scale = np.sqrt(np.where(tiny, 0.0, lam))
        return np.where(null, 0.0, scale)

    # ------------------------------------------------------------------ transform
    def transform(self, X):
        """Embed new points (m, D) -> (m, d) by the out-of-sample map of the module docstring.

        The new points' neighbours come from ``knn_index_`` (built at fit, never refitted); a point at
        distance 0 from a training point gets that point's training row.
        """
        check_is_fitted(self, "embedding_")
        X = self._check_X(X)
        if self.knn_index_ is None:
            raise InputDataError("this model was stored without its training points: use "
                                 "transform_with_neighbors(X, ind, dist) with the new points' kNN rows")
        uses_graph = self._kind == "knn" and self.gamma > 0
        ind, dist = self.knn_index_.query(X, self.n_neighbors_ if uses_graph else 1)
        Z = self.transform_with_neighbors(X, ind if uses_graph else None, dist if uses_graph else None)
        exact = dist[:, 0] == 0
        Z[exact] = self.embedding_[ind[exact, 0]]
        return Z

    def transform_with_neighbors(self, X, ind=None, dist=None):
        """Out-of-sample map given the new points' kNN among the training points.

        ``ind`` (m, k) training positions and ``dist`` (m, k) distances (e.g. the stored kNN graph of the
        flow); both None when the model has no data graph. Points equal to training points are not
        detected here (see :meth:`transform`). Works on a model rebuilt by :meth:`from_state`.
        """
        check_is_fitted(self, "embedding_")
        X = self._check_X(X)
        lam = self.eigenvalues_
        num = self._kernel_projection(X)
        den = np.repeat(lam[None, :], X.shape[0], axis=0)
        if self._kind == "knn" and self.gamma > 0:
            if ind is None or dist is None or np.shape(ind) != np.shape(dist) or len(ind) != X.shape[0]:
                raise InputDataError(f"ind and dist must be (m, k) arrays with m = {X.shape[0]} for a model with "
                                     "a kNN data graph")
            ind = np.asarray(ind, dtype=np.int64)
            m, k = ind.shape
            rows = np.repeat(np.arange(m), k)
            a = G.edge_weights(X, self.X_fit_, rows, ind.ravel(), np.asarray(dist).ravel(),
                               weight=self.graph_weight, sigma=self.sigma_).reshape(m, k)
            num, den = self._graph_rows(num, den, a, ind, a.sum(axis=1, keepdims=True))
        null = self._null_columns(lam)
        den[:, null] = 1.0  # these columns are 0 (see _null_columns)
        if np.any(np.abs(den) < NULL_EIG_RTOL * max(1.0, float(np.abs(lam).max()))):
            raise InputDataError("out-of-sample denominator lambda + gamma d(x) vanishes for a component with "
                                 "a nonzero eigenvalue; the selected eigenvalues are not usable for an extension")
        return num / den * self._scale(lam)

    def _check_X(self, X):
        X = validate_X(self, X, reset=False)
        return X

    def _kernel_projection(self, X):
        V = self.eigenvectors_
        if self.solver == "dense":
            Kc = center_rows(self._kernel()(X, self.X_fit_), self._k_col, self._k_tot)
            return Kc @ V
        return (self.nystrom_.transform(X) - self._phi_mean) @ self._PtV

    def _kernel(self):
        """The validated :class:`spectral.operators.kernels.Kernel` of ``(kernel, kernel_params)`` (scikit-learn's meaning)."""
        return kernel_from_params(self.kernel, self.kernel_params)

    def _fit_nystrom(self, X, rng):
        """Nystrom map Phi = K(X, Z) U_r S_r^-1/2 (rank r = ``nystrom_rank`` leading eigenpairs of K_ZZ)."""
        return nystrom_map(X, self._kernel(), self.n_landmarks, self.nystrom_rank, G_seed(rng))

    def _graph_rows(self, num, den, a, ind, dx):
        V, g = self.eigenvectors_, self.gamma
        safe = np.where(dx > 0, dx, 1.0)
        if self.graph_kernel is not None:  # eq. 14: neighbour-averaged row of r^dagger(L)
            return num + g * np.einsum("mk,mkd->md", a / safe, self._RV[ind]), den
        if self.laplacian == "unnormalized":
            return num + g * np.einsum("mk,mkd->md", a, V[ind]), den + g * dx
        w = a / np.sqrt(safe * self.degrees_[ind])
        return num + g * np.einsum("mk,mkd->md", w, V[ind]), den + g * (dx > 0)


    # ------------------------------------------------------------------ model state (storage.models)
    _STATE_PARAMS = ("n_components", "kernel", "gamma", "n_neighbors", "graph_weight", "laplacian", "graph_kernel",
                     "gamma_must", "gamma_cannot", "scaling", "n_landmarks", "nystrom_rank", "n_graph_eigs",
                     "eigen_solver")

    def to_state(self) -> tuple[dict, dict]:
        """``(arrays, attrs)`` for :mod:`storage.models` (no pickle, no n x n array).

        The training points ``X_fit`` (n, D) and the kNN index parameters are stored: :meth:`from_state`
        rebuilds the index once and the restored model's :meth:`transform` equals this one's. Dense models
        keep the kernel centering statistics, Nystrom ones the feature map.
        """
        check_is_fitted(self, "embedding_")
        if callable(self.kernel):
            raise InputDataError("to_state needs a named kernel (a callable cannot be stored)")
        arrays = {"X_fit": self.X_fit_, "eigenvalues": self.eigenvalues_, "eigenvectors": self.eigenvectors_}
        nys_attrs = None
        if self.solver == "nystrom":
            nys_arrays, nys_attrs = self.nystrom_.to_state()
            arrays.update({f"nystrom_{k}": v for k, v in nys_arrays.items()}, phi_mean=self._phi_mean, PtV=self._PtV)
        else:
            arrays.update(k_col=self._k_col, k_tot=np.asarray(self._k_tot))
        for name in ("degrees_", "_RV"):
            if hasattr(self, name):
                arrays[name.strip("_")] = getattr(self, name)
        attrs = {"class": "GraphKPCA", "kind": self._kind, "n_features_in": int(self.n_features_in_),
                 "sigma": float(getattr(self, "sigma_", 0.0)), "nystrom": nys_attrs, "solver": self.solver,
                 "knn_index": self.knn_index_.params,
                 "n_neighbors_fitted": int(getattr(self, "n_neighbors_", self.n_neighbors)),
                 "kernel_params": dict(self.kernel_params or {}),
                 **{k: getattr(self, k) for k in self._STATE_PARAMS}}
        return arrays, attrs

    @classmethod
    def from_state(cls, arrays: dict, attrs: dict) -> "GraphKPCA":
        """Rebuild a fitted model from :meth:`to_state` output (the kNN index rebuilt once from ``X_fit``).

        A state without ``X_fit`` (written before it was stored) gives a model that embeds new points with
        :meth:`transform_with_neighbors` only.
        """
        if attrs.get("class") != "GraphKPCA":
            raise InputDataError(f"state is not a GraphKPCA state: class={attrs.get('class')!r}")
        self = cls(solver=attrs.get("solver", "nystrom"), kernel_params=attrs["kernel_params"] or None,
                   **{k: attrs[k] for k in cls._STATE_PARAMS})
        if self.solver == "nystrom":
            nys = {k[len("nystrom_"):]: v for k, v in arrays.items() if k.startswith("nystrom_")}
            self.nystrom_ = NystromFeatures.from_state(nys, attrs["nystrom"])
            self._phi_mean, self._PtV = arrays["phi_mean"], arrays["PtV"]
        else:
            self._k_col, self._k_tot = np.asarray(arrays["k_col"]), float(arrays["k_tot"])
        self.eigenvalues_, self.eigenvectors_ = arrays["eigenvalues"], arrays["eigenvectors"]
        if "degrees" in arrays:
            self.degrees_ = arrays["degrees"]
        if "RV" in arrays:
            self._RV = arrays["RV"]
        self._kind, self.sigma_, self.n_features_in_ = attrs["kind"], attrs["sigma"], attrs["n_features_in"]
        self.n_neighbors_ = attrs["n_neighbors_fitted"]
        self.X_fit_, self.knn_index_ = None, None
        if "X_fit" in arrays:
            self.X_fit_ = np.asarray(arrays["X_fit"], dtype=np.float64)
            self.knn_index_ = KNNIndex.rebuild(self.X_fit_, attrs["knn_index"])
        self.embedding_ = self.eigenvectors_ * self._scale(self.eigenvalues_)
        return self


def _numerically_zero(lam) -> np.ndarray:
    """(d,) bool: ``|lambda| <= NULL_EIG_RTOL * max |lambda|`` for eigenvalues ``lam`` (d,)."""
    lam = np.asarray(lam, dtype=np.float64)
    return np.abs(lam) <= NULL_EIG_RTOL * max(float(np.abs(lam).max(initial=0.0)), np.finfo(float).tiny)


def G_seed(rng: np.random.Generator) -> int:
    """An integer seed spawned from the estimator's generator (for ARPACK's start vector)."""
    return int(rng.integers(0, 2**31 - 1))
