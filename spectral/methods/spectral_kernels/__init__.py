"""LQCL09 (Liu, Qian, Cui & Liu, IJCAI 2009): spectral kernel learning for semi-supervised classification.

- :class:`TSK`: transductive spectral kernel, spectrum learned by the linear program of eq. 14, eq. 5 classifier,
  eq. 17-19 out-of-sample extension, ``kernel`` for ``SVC(kernel="precomputed")`` (TSK+SVM);
- :class:`RSK`: regularized spectral kernel of Sect. 3 (Zhou et al.'s consistency method as a kernel);
- :func:`harmonic_function`, :func:`consistency_method`: Table 3 baselines (scikit-learn's estimators on the
  same graph);
- building blocks for the at-scale path: :func:`spectral_basis`, :func:`transductive_scores`,
  :meth:`TSK.fit_basis` with :class:`GraphParams`, :func:`resolve_n_neighbors` (k of ``n_neighbors="auto"``);
  ``to_state`` / ``from_state`` (:mod:`.state`) for stored models. Internals (the LP of eq. 14 in :mod:`.lp`,
  :func:`.basis.extend_vectors`, :func:`.scores.class_matrix`) stay in their submodules.
"""

from eigenflow.spectral.methods.spectral_kernels.baselines import consistency_method, harmonic_function
from eigenflow.spectral.methods.spectral_kernels.basis import SpectralBasis, spectral_basis
from eigenflow.spectral.methods.spectral_kernels.classifier_state import GraphParams
from eigenflow.spectral.methods.spectral_kernels.estimators import RSK, TSK, resolve_n_neighbors, transductive_scores

__all__ = ["TSK", "RSK", "harmonic_function", "consistency_method", "SpectralBasis", "spectral_basis",
           "transductive_scores", "GraphParams", "resolve_n_neighbors"]
