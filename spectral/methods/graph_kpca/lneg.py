"""LNEG: local nonlinear embedding on graphs (STG18 eq. 25-30, Algorithm 3), scikit-learn API.

1. kNN neighbourhoods N_i (k = ``n_neighbors``, exact search; no self-neighbour).
2. Per-point sparse regressions on the neighbours' coordinates and their powers up to P (eq. 25-30,
   :mod:`spectral.methods.graph_kpca.lneg_weights`), chunk by chunk (optionally one Dask task per chunk).
3. The N x N weight matrix W: W_ij = w_ij[1], the linear (first-order) coefficients, which sum to one
   over j as in LLE (eq. 6), so (I - W) 1 = 0; the higher-order terms absorb the local curvature.
   The full coefficients are kept in ``coef_`` (n, k, P).
4. Embedding (eq. 8 with the graph regularizer): the d eigenvectors of
   M = (I - W)^T (I - W) + gamma L_G with the smallest eigenvalues after the constant one (eigenvalue 0),
   L_G = D - A. Default graph: the paper's a_ij = y_i^T y_j / (||y_i|| ||y_j||) on the kNN pairs
   (clipped at 0 so that L_G stays PSD).

With degree = 1, l1 = 0 and gamma = 0 this is exactly LLE (scikit-learn's LocallyLinearEmbedding with
the same ``reg``). ``l1 > 0`` without graph (gamma = 0) is "LNE" in the paper's experiments.

Out-of-sample: a new point x gets its reconstruction weights from its k nearest training points (the same
regression), and psi(x) = sum_j w_xj[1] psi_j; a point equal to a training point gets its training row.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from eigenflow.spectral._arrays import is_dask
from eigenflow.spectral._transformer import EmbeddingTransformerMixin
from eigenflow.spectral._validation import check_choice, check_fitted_X, check_float, check_int, clip_int, validate_X
from eigenflow.spectral.eigen import MATRIX_SOLVERS
from eigenflow.spectral.eigen.dispatch import AUTO_DENSE_MAX_N
from eigenflow.spectral.eigen.signs import sign_flip
from eigenflow.spectral.graph.laplacian import laplacian
from eigenflow.spectral.methods.estimator_state import StateMixin
from eigenflow.spectral.methods.graph_kpca import graphs as G
from eigenflow.spectral.methods.graph_kpca._core import KNN_METHOD, bottom_eigs_dense
from eigenflow.spectral.methods.graph_kpca.lneg_weight_tasks import local_weights_gathered, weight_matrix
from eigenflow.spectral.methods.graph_kpca.lneg_weights import EXPANSIONS, local_weights, local_weights_chunk
from eigenflow.spectral.neighbours.index import KNNIndex

#: smallest eigenpairs of a sparse PSD matrix: the randomized solver targets the large end (spectral.eigen)
EIGEN_SOLVERS = tuple(s for s in MATRIX_SOLVERS if s != "randomized")


class LNEG(StateMixin, EmbeddingTransformerMixin, BaseEstimator):
    """Local nonlinear embedding on graphs (STG18 eq. 25-30).

    Parameters
    ----------
    n_components : int, embedding dimension d.
    n_neighbors : int, k.
    degree : int >= 1, P (the highest power of eq. 26).
    l1 : float >= 0, sparsity weight of eq. 30 (relative to each point's local scale); 0 = plain LS.
    gamma : float >= 0, graph regularizer weight.
    graph : "cosine" (cosine similarity on kNN pairs, the paper's choice), "knn" (Gaussian weights),
        None, or an (n, n) symmetric non-negative adjacency given by the user.
    reg : float > 0, Tikhonov regularization of the local Gram (scikit-learn's LLE ``reg``).
    expansion : "centered" | "raw" (see :mod:`spectral.methods.graph_kpca.lneg_weights`).
    eigen_solver : "auto" | "dense" | "arpack" | "lobpcg". "auto": dense ``eigh`` for n <= 2000
        (``spectral.eigen.dispatch.AUTO_DENSE_MAX_N``), else :func:`spectral.eigen.eigensolve` on the sparse
        M (its "auto" choice, LOBPCG with AMG); "arpack" / "lobpcg" always go through eigensolve on sparse M;
        "dense" forms M as an (n, n) array.
    max_iter, tol : FISTA settings (l1 > 0). chunk_size : points (rows) per regression chunk.
    use_dask : run the chunks as Dask tasks on the active scheduler, each task holding only its rows and
        its neighbours' rows (:mod:`spectral.methods.graph_kpca.lneg_weight_tasks`); a Dask array X always does, one
        task per row chunk of X. random_state : seed (iterative solvers).

    Attributes
    ----------
    embedding_ (n, d), eigenvalues_ (d,), coef_ (n, k, P), neighbors_ (n, k), weights_ csr (n, n), graph_
    (None when gamma = 0), n_iter_ (FISTA iterations of the slowest chunk; 1 for the closed form).
    """

    def __init__(self, n_components=2, *, n_neighbors=10, degree=2, l1=0.0, gamma=0.0, graph="cosine",
                 reg=1e-3, expansion="centered", eigen_solver="auto", max_iter=500, tol=1e-7,
                 chunk_size=1024, use_dask=False, random_state=None):
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.degree = degree
        self.l1 = l1
        self.gamma = gamma
        self.graph = graph
        self.reg = reg
        self.expansion = expansion
        self.eigen_solver = eigen_solver
        self.max_iter = max_iter
        self.tol = tol
        self.chunk_size = chunk_size
        self.use_dask = use_dask
        self.random_state = random_state

    def _params(self, n):
        return dict(
            d=clip_int("n_components", self.n_components, n - 2, bound="n_samples - 2"),
            k=clip_int("n_neighbors", self.n_neighbors, n - 1),
            degree=check_int("degree", self.degree, low=1, high=10),
            l1=check_float("l1", self.l1, low=0.0),
            gamma=check_float("gamma", self.gamma, low=0.0),
            reg=check_float("reg", self.reg, low=0.0, low_inclusive=False),
            expansion=check_choice("expansion", self.expansion, EXPANSIONS),
            solver=check_choice("eigen_solver", self.eigen_solver, EIGEN_SOLVERS),
            max_iter=check_int("max_iter", self.max_iter, low=1),
            tol=check_float("tol", self.tol, low=0.0, low_inclusive=False),
            chunk=check_int("chunk_size", self.chunk_size, low=1),
        )

    def fit(self, X, y=None):
        """Fit on X (n, D), a numpy or a Dask array (the kNN search and ``X_fit_`` use it in memory; the
        local regressions run as Dask tasks over X's row chunks)."""
        Xd = X if is_dask(X) else None
        X = validate_X(self, X, min_samples=4)
        n = X.shape[0]
        p = self._params(n)
        self.knn_index_ = KNNIndex.build(X, p["k"], method=KNN_METHOD)  # built once, queried by transform
        ind, dist = self.knn_index_.neighbor_graph()
        dist = dist.astype(np.float64)
        opts = dict(degree=p["degree"], l1=p["l1"], reg=p["reg"], expansion=p["expansion"], max_iter=p["max_iter"],
                    tol=p["tol"])
        if Xd is not None:
            coef, n_iter = local_weights_gathered(Xd, ind, **opts)
        elif self.use_dask:
            coef, n_iter = local_weights_gathered(X, ind, chunk_rows=p["chunk"], **opts)
        else:
            coef, n_iter = local_weights(X, ind, chunk_size=p["chunk"], **opts)
        W = weight_matrix(coef, ind)
        IW = sp.identity(n, format="csr") - W
        M = (IW.T @ IW).tocsr()  # eq. 8 / 9: K_y of LLE is the pseudo-inverse of this
        self.graph_ = self._graph(X, ind, dist, n) if p["gamma"] > 0 else None
        if self.graph_ is not None:
            L, _ = laplacian(self.graph_, "unnormalized")
            M = (M + p["gamma"] * L).tocsr()
        lam, V = self._bottom(M, p["d"], p["solver"])
        self.X_fit_ = X.copy()
        self.coef_, self.neighbors_, self.weights_ = coef, ind, W
        self.eigenvalues_, self.embedding_ = lam, V
        self.n_iter_ = max(1, n_iter)  # FISTA iterations of the slowest chunk (1: closed form)
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X, y).embedding_

    def _graph(self, X, ind, dist, n):
        if isinstance(self.graph, str):
            kind = check_choice("graph", self.graph, ("cosine", "knn"))
            return G.knn_adjacency(X, ind, dist, weight="cosine" if kind == "cosine" else "gaussian")
        if self.graph is None:
            return None
        return G.check_user_graph(self.graph, n)

    def _bottom(self, M, d, solver):
        """d smallest eigenpairs of the sparse M (n, n) after the constant one; dense only when asked or
        n <= AUTO_DENSE_MAX_N with solver="auto"."""
        n = M.shape[0]
        if solver == "dense" or (solver == "auto" and n <= AUTO_DENSE_MAX_N):
            return bottom_eigs_dense(M.toarray(), d, skip=1)
        from eigenflow.spectral.eigen import eigensolve

        res = eigensolve(M.tocsr(), d + 1, which="smallest", solver=solver, random_state=self.random_state)
        self.eigen_info_ = {"solver": res.solver, "n_iter": res.n_iter}
        return res.values[1:], sign_flip(res.vectors[:, 1:])

    def transform(self, X):
        """psi(x) = sum_j w_xj[1] psi_j over the k nearest training points (module docstring)."""
        X = check_fitted_X(self, X, "embedding_")
        k = self.neighbors_.shape[1]
        ind, dist = self.knn_index_.query(X, k)
        out = np.empty((X.shape[0], self.embedding_.shape[1]))
        step = check_int("chunk_size", self.chunk_size, low=1)
        for i0 in range(0, X.shape[0], step):
            sl = slice(i0, i0 + step)
            coef, _ = local_weights_chunk(self.X_fit_, ind[sl], 0, 0, degree=self.degree, l1=self.l1,
                                          reg=self.reg, expansion=self.expansion, max_iter=self.max_iter,
                                          tol=self.tol, centers=X[sl])
            out[sl] = np.einsum("mk,mkd->md", coef[:, :, 0], self.embedding_[ind[sl]])
        exact = dist[:, 0] == 0  # a training point: its training row
        out[exact] = self.embedding_[ind[exact, 0]]
        return out
