"""How to make a model: a shell command or a ``module:Class`` spec, plus options
(:class:`PredictorSpec`, picklable, so Dask workers can start their own)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lmchallenge.errors import ModelError
from lmchallenge.model.neural import NEEDED as NEURAL_NEEDED, install_hint
from lmchallenge.model.session import InProcessModel, python_name
from lmchallenge.model.shell import ShellModel, shell_command

QUALIFIED_NAME = re.compile(r"^([^: ]+):([^: ]+)$")


def is_python_spec(spec: str) -> bool:
    """True if ``spec`` names a Python class or function as ``module:Name``."""
    return QUALIFIED_NAME.match(spec) is not None


def load_python_object(spec: str) -> Callable[..., Any]:
    """Import ``module.sub:Attr.sub`` and return the attribute.

    The module is looked for first in the current directory, then on ``sys.path``, as
    ``python -m`` does (the current directory is put first on ``sys.path`` if it is not
    there yet).

    A process imports a module once: a long-lived one (a Dask worker of a shared cluster)
    would go on running a model's old code after its file was edited, and a worker started
    later the new one, in one run.  So the module's file is stamped (size, modification
    time) when this first imports it, and a later load finds it changed.

    Raises:
        ModelError: the module or attribute cannot be found, or importing the module
            raised (its type and message are named), or the module's file changed since
            this process imported it.
    """
    match = QUALIFIED_NAME.match(spec)
    if match is None:
        raise ModelError(spec, "not a module:Name spec", stderr_tail=None)
    _current_directory_first()
    obj = module = _imported(spec, match.group(1))
    _check_unchanged(spec, module)
    try:
        for attr in match.group(2).split("."):
            obj = getattr(obj, attr)
    except AttributeError as e:
        raise ModelError(spec, f"cannot load: {e}", stderr_tail=None) from None
    return obj


def _imported(spec: str, name: str) -> Any:
    """The module ``name`` of the model ``spec``, imported; a failure as a ModelError."""
    try:
        return importlib.import_module(name)
    except (ImportError, AttributeError) as e:
        missing = [getattr(e, "name", None)] if isinstance(e, ModuleNotFoundError) else []
        hint = f" ({install_hint(missing)})" if missing and missing[0] in NEURAL_NEEDED else ""
        raise ModelError(spec, f"cannot load: {e}{hint}", stderr_tail=None) from None
    except (Exception, SystemExit) as e:  # the module's own code failed
        raise ModelError(spec, f"importing {name!r} raised {type(e).__name__}: {e}",
                         stderr_tail=None) from e


SOURCE_STAMP = "__lmc_source_stamp__"
"""Attribute of a model's module: its file's size and modification time when first loaded."""


def _check_unchanged(spec: str, module: Any) -> None:
    """Stamp ``module``'s file the first time, else raise ModelError if it changed since."""
    path = getattr(module, "__file__", None)
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return
    if stat is None:
        return
    stamp = (stat.st_size, stat.st_mtime_ns)
    before = getattr(module, SOURCE_STAMP, None)
    if before is None:
        setattr(module, SOURCE_STAMP, stamp)
    elif before != stamp:
        raise ModelError(spec, f"its module's file {path} changed since this process imported "
                         "it: it would run the old code (Python imports a module once); "
                         "restart the Dask workers (or this process) to load the new one",
                         stderr_tail=None)


def _current_directory_first() -> None:
    """Put the current directory first on ``sys.path`` (as ``python -m`` does) unless it is
    already there ('' or its absolute path)."""
    cwd = os.getcwd()
    if not any(entry in ("", ".") or os.path.abspath(entry) == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def construct(spec: str, options: dict[str, Any], game: str | None = None) -> Any:
    """The model ``spec`` names, called with ``options`` as keyword arguments, to play
    ``game`` (None: not said).

    Raises:
        ModelError: it cannot be loaded, refuses ``game`` (its ``refuses``:
            :attr:`lmchallenge.model.api.Model.refuses`; before it is made, and again once
            made, for a model whose games depend on what it loaded), does not take these
            options, or raised while being made (naming the exception's type and message; a
            ModelError of its own, which names the model already, as it is).
    """
    import inspect  # only for Python models: a slow import

    factory = load_python_object(spec)
    why = _refusal(factory, game)
    if why is not None:
        raise ModelError(spec, f"does not play {game}: {why}", stderr_tail=None)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: just call it
        signature = None
    if signature is not None:
        try:
            signature.bind(**options)
        except TypeError as e:
            raise ModelError(spec, f"does not take the options {json.dumps(options)}: {e} "
                             f"(it takes {signature})", stderr_tail=None) from None
    made = started(spec, factory, options)
    why = _refusal(made, game)
    if why is not None:     # an n-gram model file is of words or of characters
        with contextlib.suppress(Exception):
            close_model(made)
        raise ModelError(spec, f"does not play {game}: {why}", stderr_tail=None)
    return made


def started(name: str, factory: Callable[..., Any], options: dict[str, Any]) -> Any:
    """``factory(**options)``, a failure as a ModelError naming the model ``name``.

    Raises:
        ModelError: its own (which names the model already) as it is; any other exception
            as "raised TYPE while starting: MESSAGE".
    """
    try:
        return factory(**options)
    except ModelError:
        raise
    except (Exception, SystemExit) as e:
        raise ModelError(name, f"raised {type(e).__name__} while starting: {e}",
                         stderr_tail=None) from e


START_TIMEOUT = 600.0
"""Seconds a shell model may take by default to give its first answer (``--start-timeout``):
its start is in them (a neural model loading its weights takes minutes on a CPU)."""


@dataclass(frozen=True)
class PredictorSpec:
    """How to make a model: a shell command or a ``module:Class`` spec, plus options.

    Attributes:
        spec: the shell command or ``module:Class``.
        options: ``-o/--options`` JSON: keyword arguments of a Python model, or
            command-line arguments of a shell model (:func:`shell_command`).
        timeout: seconds a shell model may take to answer (a Python model's call that runs
            longer is warned about: :class:`~lmchallenge.model.session.InProcessModel`).
        window: predict requests in flight for a shell model.
        start_timeout: seconds a shell model may take to give its first answer (its start),
            where more than ``timeout``.
    """

    spec: str
    options: dict[str, Any] = None  # type: ignore[assignment]
    timeout: float = 60.0
    window: int = 256
    start_timeout: float = START_TIMEOUT

    @property
    def is_python(self) -> bool:
        return is_python_spec(self.spec)

    def create(self, pass_stderr: bool = False, game: str | None = None) -> Any:
        """Start the model (a new process for a shell model) to play ``game`` (``we``,
        ``wc``, ``wr``, ``ce``; None: not said): a shell model finds it in ``LMC_GAME``.
        With ``pass_stderr``, what a shell model writes to its stderr is written to this
        process' stderr too (:class:`~lmchallenge.model.shell.ShellModel`).

        Raises:
            ModelError: a Python model cannot be made, or refuses ``game``
                (:func:`construct`).
        """
        options = dict(self.options or {})
        if self.is_python:
            made = construct(self.spec, options, game)
            if hasattr(made, "__enter__") and hasattr(made, "__exit__"):   # LM Challenge 5.x
                # runs a Python model in a `with` block: what __enter__ returns is the model
                entered = started(self.spec, made.__enter__, {})
                return InProcessModel(_predicting(self.spec, entered, context=made),
                                      self.spec, context=made, overdue=self.timeout)
            return InProcessModel(_predicting(self.spec, made), self.spec,
                                  overdue=self.timeout)
        return ShellModel(self.spec, options, timeout=self.timeout, window=self.window,
                          pass_stderr=pass_stderr, game=game, start_timeout=self.start_timeout)

    def describe(self) -> str:
        """The command line or spec, for messages and manifests."""
        return self.spec if self.is_python else shell_command(self.spec, dict(self.options or {}))


def _predicting(spec: str, made: Any, context: Any = None) -> Any:
    """``made``, the object the Python model ``spec`` made (``context``: the one whose
    ``__enter__`` gave it), if it has ``predict`` or ``predict_batch``.

    Raises:
        ModelError: it has neither (it is closed first), so that a spec naming something
            other than a model is said when it starts, not at its first query.
    """
    if callable(getattr(made, "predict", None)) or callable(getattr(made, "predict_batch", None)):
        return made
    with contextlib.suppress(Exception):
        if context is not None:
            context.__exit__(None, None, None)
        else:
            close_model(made)
    raise ModelError(spec, f"is not a model: it made an object of type {python_name(made)}, "
                     "which has no predict(context, candidates) nor predict_batch(queries) "
                     "method", stderr_tail=None)


def _refusal(factory: Any, game: str | None) -> str | None:
    """Why the model class ``factory`` (or a model made) does not play ``game``, if it says
    so in ``refuses``."""
    refuses = getattr(factory, "refuses", None)
    if game is None or not isinstance(refuses, Mapping):
        return None
    why = refuses.get(game)
    return None if why is None else str(why)


def close_model(model: Any) -> None:
    """Close ``model`` if it has ``close`` or ``__exit__``."""
    if hasattr(model, "close"):
        model.close()
    elif hasattr(model, "__exit__"):
        model.__exit__(None, None, None)


__all__ = ["PredictorSpec", "close_model", "is_python_spec", "load_python_object", "construct"]
