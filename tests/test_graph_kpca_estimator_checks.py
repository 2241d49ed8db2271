"""scikit-learn's estimator checks for the GRAD estimators of paper 003 (no exemption needed)."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from spectral.graph_kpca import LNEG, GraphKPCA, MultiGraphKPCA


# small neighbourhoods: the checks fit on 10-30 samples
@parametrize_with_checks([GraphKPCA(2, n_neighbors=3), LNEG(2, n_neighbors=3),
                          MultiGraphKPCA(2, gamma=0.0, learn_beta=False)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
