"""Eigensolvers behind one dispatch (:func:`eigensolve`) and one result type (:class:`EigenResult`).

One module per solver: :mod:`.dense` (LAPACK reference), :mod:`.arpack` (eigsh), :mod:`.lobpcg`
(LOBPCG + AMG), :mod:`.randomized` (block subspace / Krylov / Chebyshev with Rayleigh-Ritz),
:mod:`.nystrom` (one-shot Nystrom, CK08 Sect. 4); :mod:`.generalized` handles ``B``.
"""

from eigenflow.spectral.eigen._result import EigenResult
from eigenflow.spectral.eigen.dispatch import MATRIX_SOLVERS, OPERATOR_SOLVERS, SOLVERS, eigensolve
from eigenflow.spectral.eigen.signs import sign_flip

__all__ = ["EigenResult", "MATRIX_SOLVERS", "OPERATOR_SOLVERS", "SOLVERS", "eigensolve", "sign_flip"]
