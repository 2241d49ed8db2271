"""Local nonlinear regressions of LNEG (STG18 eq. 25-30), batched over chunks of points.

Point i (features y_i in R^D) is regressed on its k neighbours j in N_i, entry-wise (eq. 25-26):

    y_im = sum_j sum_{p=1..P} w_ij[p] h_p(y_jm) + e_im,    m = 1..D,

with h_1(y) = y and, for p >= 2, h_p = (y_jm - y_im)^p (expansion="centered": the Taylor expansion around
y_i, invariant to translations) or y_jm^p (expansion="raw", eq. 26 literally). As in LLE (eq. 6) the
linear coefficients sum to one, so the residual is Z_i w_i with columns y_i - y_j (linear) and -h_p(y_j)
(p >= 2), and the coefficients w_i in R^{kP} solve (eq. 30 per point, sparse regularized LS)

    min_w  w^T (Z^T Z + R I) w / t + l1 ||w||_1   s.t.  sum_j w_ij[1] = 1,

with R = reg * t, t = tr(C_i), C_i the local Gram of the linear block (scikit-learn's LLE regularization),
so ``l1`` is relative to the local scale. Each nonlinear block is rescaled to the Frobenius norm of the
linear block before solving (coefficients are returned in data units).

l1 = 0: closed form w = G^-1 a / (a^T G^-1 a) (with P = 1 exactly scikit-learn's barycenter weights).
l1 > 0: FISTA with the exact proximal map of l1 ||.||_1 + indicator{a^T w = 1}:
w = soft(v - mu a, tau), the scalar mu found exactly from the breakpoints of the piecewise-linear a^T w.
"""

from __future__ import annotations

import numpy as np

EXPANSIONS = ("centered", "raw")


def _design(X, ind, i0, i1, P, expansion, centers=None):
    """Z (b, D, kP) for points i0..i1 (or for query ``centers`` (b, D) with neighbours ind (b, k))."""
    Y = X[i0:i1] if centers is None else centers  # (b, D)
    nb = X[ind if centers is not None else ind[i0:i1]]  # (b, k, D)
    off = nb - Y[:, None, :]  # (b, k, D): y_j - y_i
    lin_norm = np.sqrt((off**2).sum(axis=(1, 2)))  # (b,)
    blocks, scales = [-off], [np.ones_like(lin_norm)]  # linear columns y_i - y_j
    base = off if expansion == "centered" else nb
    for p in range(2, P + 1):
        B = -(base**p)
        nrm = np.sqrt((B**2).sum(axis=(1, 2)))
        s = np.where(nrm > 0, lin_norm / np.where(nrm > 0, nrm, 1.0), 1.0)  # match the linear block's norm
        blocks.append(B * s[:, None, None])
        scales.append(s)
    Z = np.concatenate(blocks, axis=1).transpose(0, 2, 1)  # (b, D, kP)
    return Z, np.stack(scales, axis=1)  # scales (b, P)


def _gram(Z, k, reg):
    G = np.einsum("bdi,bdj->bij", Z, Z)
    t = np.einsum("bii->b", G[:, :k, :k])
    t = np.where(t > 0, t, 1.0)
    G = G / t[:, None, None]
    idx = np.arange(G.shape[1])
    G[:, idx, idx] += reg  # R / t = reg (scikit-learn: reg * trace(C), or reg if the trace is 0)
    return G


def _closed_form(G, a):
    x = np.linalg.solve(G, np.broadcast_to(a, G.shape[:2])[..., None])[..., 0]
    return x / (x @ a)[:, None]


def _soft(V, tau):
    return np.sign(V) * np.maximum(np.abs(V) - tau, 0.0)


def _prox_affine_l1(V, a, tau):
    """argmin_w 0.5 ||w - v||^2 + tau ||w||_1 s.t. a^T w = 1, row-wise for V (b, q); a is 0/1, tau (b,).

    w = soft(v - mu a, tau); g(mu) = a^T w is piecewise linear and non-increasing in mu with breakpoints
    v_j +- tau, so mu is found exactly by evaluating g at the sorted breakpoints and interpolating.
    """
    lin = a.astype(bool)
    tau = np.broadcast_to(np.asarray(tau, dtype=np.float64).reshape(-1), (V.shape[0],))[:, None]
    vl = V[:, lin]  # (b, k)
    k = vl.shape[1]
    bp = np.sort(np.concatenate([vl - tau, vl + tau], axis=1), axis=1)  # (b, 2k)
    g = _soft(vl[:, None, :] - bp[:, :, None], tau[:, :, None]).sum(axis=2)  # (b, 2k), non-increasing
    i = (g >= 1.0).sum(axis=1) - 1  # last breakpoint with g >= 1 (-1: before the first one)
    rows = np.arange(V.shape[0])
    ic = np.clip(i, 0, 2 * k - 2)
    g0, g1, b0, b1 = g[rows, ic], g[rows, ic + 1], bp[rows, ic], bp[rows, ic + 1]
    mu_mid = b0 + (g0 - 1.0) * (b1 - b0) / np.where(g0 > g1, g0 - g1, 1.0)
    mu_left = (vl.sum(axis=1) - k * tau[:, 0] - 1.0) / k  # all linear terms active, slope -k
    mu = np.where(i < 0, mu_left, mu_mid)
    return _soft(V - mu[:, None] * a, tau)


def _fista(G, a, l1, w0, max_iter, tol):
    """FISTA on w^T G w + l1 ||w||_1 s.t. a^T w = 1, batched over the first axis of G (b, q, q)."""
    step = 1.0 / (2.0 * np.linalg.eigvalsh(G)[:, -1])  # 1 / Lipschitz constant of the gradient 2 G w
    w, z, t = w0.copy(), w0.copy(), 1.0
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        grad = 2.0 * np.einsum("bij,bj->bi", G, z)
        w_new = _prox_affine_l1(z - step[:, None] * grad, a, step * l1)
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        z = w_new + ((t - 1.0) / t_new) * (w_new - w)
        delta = np.abs(w_new - w).max()
        w, t = w_new, t_new
        if delta < tol:
            break
    return w, n_iter


def local_weights_chunk(X, ind, i0, i1, *, degree, l1, reg, expansion, max_iter=500, tol=1e-7, centers=None):
    """Coefficients (b, k, P) of points i0..i1 (or of query ``centers``) on their neighbours ``ind``.

    Returns ``(coef (b, k, P) in data units, n_iter)``; coef[:, :, 0] (the linear part) sums to 1.
    """
    k = ind.shape[1]
    Z, scales = _design(X, ind, i0, i1, degree, expansion, centers)
    G = _gram(Z, k, reg)
    a = np.zeros(k * degree)
    a[:k] = 1.0
    w = _closed_form(G, a)
    n_iter = 0
    if l1 > 0:
        w, n_iter = _fista(G, a, l1, w, max_iter, tol)
    coef = w.reshape(-1, degree, k).transpose(0, 2, 1) * scales[:, None, :]
    return coef, n_iter


def local_weights(X, ind, *, degree, l1, reg, expansion, chunk_size=1024, max_iter=500, tol=1e-7):
    """All points' coefficients (n, k, P) chunk by chunk (memory b * D * kP per chunk), and the largest
    number of FISTA iterations of a chunk (0 when l1 = 0)."""
    n, k = ind.shape
    out = np.empty((n, k, degree))
    n_iter = 0
    for i0 in range(0, n, chunk_size):
        i1 = min(n, i0 + chunk_size)
        out[i0:i1], it = local_weights_chunk(X, ind, i0, i1, degree=degree, l1=l1, reg=reg,
                                             expansion=expansion, max_iter=max_iter, tol=tol)
        n_iter = max(n_iter, it)
    return out, n_iter
