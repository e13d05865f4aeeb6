"""``lmchallenge.core.model``, where LM Challenge 5.x documents its model classes: the same
classes as :mod:`lmchallenge.model.api` and :mod:`lmchallenge.model.shell`."""

from lmchallenge.model.api import FilteringWordModel, Model, WordModel
from lmchallenge.model.shell import ShellModel

__all__ = ["Model", "WordModel", "FilteringWordModel", "ShellModel"]
