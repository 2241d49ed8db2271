"""Exception hierarchy of the mathematical core.

Every error raised on purpose by :mod:`spectral` derives from :class:`EigenflowError`, itself a
``ValueError`` so that scikit-learn's estimator checks and ordinary ``except ValueError`` code keep
working. Messages name the parameter, the allowed range and the value received.
"""

from __future__ import annotations


class EigenflowError(ValueError):
    """Base class of every deliberate error of eigenflow's mathematical core."""


class ParameterError(EigenflowError):
    """A parameter is outside its allowed range or of the wrong kind."""


class InputDataError(EigenflowError):
    """The data (X, y, a graph, a pair list) is malformed: NaN/inf, wrong shape, wrong dtype."""


class InputTypeError(InputDataError, TypeError):
    """The data is of a kind the method does not take (e.g. sparse input to a dense-only estimator).

    Also a ``TypeError``, as scikit-learn's ``check_array`` raises for sparse input.
    """


class DisconnectedGraphError(EigenflowError):
    """A graph has several connected components where the method needs one."""


class ConvergenceError(EigenflowError):
    """An iterative solver stopped before reaching its tolerance (raised only when asked to)."""


class NotPositiveDefiniteError(EigenflowError):
    """A matrix that must be (semi-)definite is not, beyond the documented tolerance."""


class ParameterAdjustedWarning(UserWarning):
    """A parameter that depends on the data size was clipped or chosen from the data.

    The message names the parameter, the value given and the value used, e.g.
    ``"n_neighbors=15 is larger than n_samples - 1 = 9; using n_neighbors=9"``.
    """


class KernelFallbackWarning(UserWarning):
    """An estimator could not learn its model from the data and fitted a named fallback instead.

    The message names the reason and the fallback, which the estimator also records (e.g. TSK's
    ``fallback_kernel_`` when its linear program's optimum is the zero spectrum).
    """
