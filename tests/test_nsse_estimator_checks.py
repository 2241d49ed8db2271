"""scikit-learn's estimator checks for the paper 001 estimators (NSSE, SUPLAP): no exemption needed.

The checks fit on 10-30 samples of 2-3 classes; the default n_neighbors=5 is fine there because both
class graphs take ``min(n_neighbors, available)`` neighbours per point (paper 001 eqs. 9-10).
"""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from spectral.nsse import NSSE, SupervisedLaplacianEigenmaps


@parametrize_with_checks([NSSE(random_state=0), SupervisedLaplacianEigenmaps()])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)
