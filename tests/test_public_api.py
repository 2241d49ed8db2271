"""Every public name of :mod:`spectral` resolves to the object defined in its submodule."""

import importlib

import pytest

import spectral


@pytest.mark.parametrize("name", spectral.__all__)
def test_public_name_resolves(name):
    obj = getattr(spectral, name)
    assert obj is getattr(importlib.import_module(spectral._EXPORTS[name]), name)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        spectral.nope  # noqa: B018
