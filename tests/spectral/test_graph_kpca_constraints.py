"""STG18 eq. 22-24: the spectrum of the constraint term built from labels, against its closed form.

With all pairs among the labeled points (a of class 0, b of class 1), A^S is two cliques and A^D the
complete bipartite graph K_{a,b}, so -g1 L^S + g2 L^D has eigenvalue g2 (a + b) on the label contrast
(1/a on class 0, -1/b on class 1), g2 b - g1 a on the (a-1)-dim zero-sum vectors of class 0,
g2 a - g1 b on those of class 1, and 0 elsewhere. This is why, on USPS, psi_1 of GKPCA is the label
contrast (eigenvalue g2 |Omega| = 250 at p = 0.5, above every kernel eigenvalue) and the must-link and
cannot-link terms cancel (g1 = g2) on the within-class directions (benchmarks/results/graph_kpca.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from eigenflow.spectral.methods.graph_kpca import GraphKPCA
from eigenflow.spectral.methods.graph_kpca import graphs as G
from eigenflow.spectral.graph.laplacian import laplacian


def constraint_term(yl, g1, g2):
    AS, AD = G.constraint_graphs(len(yl), *G.pairs_from_labels(yl))
    LS, LD = (laplacian(A)[0].toarray() for A in (AS, AD))
    return -g1 * LS + g2 * LD


@pytest.mark.parametrize(("a", "b", "g1", "g2"), [(7, 4, 0.5, 0.5), (5, 9, 0.3, 1.2), (6, 6, 1.0, 0.0)])
def test_constraint_spectrum_closed_form(a, b, g1, g2):
    n = 30
    yl = np.full(n, -1)
    perm = np.random.default_rng(0).permutation(n)
    yl[perm[:a]], yl[perm[a:a + b]] = 0, 1
    got = np.sort(np.linalg.eigvalsh(constraint_term(yl, g1, g2)))
    expected = np.sort(np.concatenate([[g2 * (a + b)], np.full(a - 1, g2 * b - g1 * a),
                                       np.full(b - 1, g2 * a - g1 * b), np.zeros(n - a - b + 1)]))
    np.testing.assert_allclose(got, expected, atol=1e-10)
    contrast = np.where(yl == 0, 1.0 / a, 0.0) - np.where(yl == 1, 1.0 / b, 0.0)
    np.testing.assert_allclose(constraint_term(yl, g1, g2) @ contrast, g2 * (a + b) * contrast, atol=1e-10)


def test_many_labels_make_psi1_the_label_contrast():
    """g2 |Omega| above the kernel's spectrum: psi_1 is ~ the contrast, ~0 on unlabeled points."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 5))
    y = (X[:, 0] > 0).astype(int)
    yl = np.full(120, -1)
    lab = rng.choice(120, 60, replace=False)
    yl[lab] = y[lab]
    m = GraphKPCA(3, kernel_params={"gamma": 0.1}, graph=None, gamma_must=0.5, gamma_cannot=0.5).fit(X, yl)
    v = m.eigenvectors_[:, 0]
    assert m.eigenvalues_[0] > 0.5 * 60  # g2 |Omega| plus the (PSD) kernel's part along the contrast
    assert abs(np.corrcoef(v[lab], 2 * y[lab] - 1)[0, 1]) > 0.99
    unl = np.setdiff1d(np.arange(120), lab)
    assert np.abs(v[unl]).mean() < 0.2 * np.abs(v[lab]).mean()
