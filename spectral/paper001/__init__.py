"""Paper 001: NSSE (nonlinear supervised smooth embedding) and its SUPLAP baseline.

>>> from spectral.paper001 import NSSE, SupervisedLaplacianEigenmaps   # doctest: +SKIP
"""

from .nsse import NSSE, SupervisedLaplacianEigenmaps

__all__ = ["NSSE", "SupervisedLaplacianEigenmaps"]
