"""Loading a causal LM and its tokenizer: a Hugging Face model directory or a ``.gguf`` file.

A directory is read with ``AutoModelForCausalLM``/``AutoTokenizer.from_pretrained`` (local
files only: nothing is downloaded).  A ``.gguf`` file is read by transformers' GGUF support
(``gguf_file=``; it needs the ``gguf`` package), which dequantises the weights (Q4_1, Q8_0,
...) to the requested dtype and rebuilds the tokenizer from the file's metadata.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lmchallenge.errors import ModelError, first_line

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class Loaded:
    """A model ready to run: ``model`` (eval mode, on ``device``) and its ``tokenizer``."""

    model: Any
    tokenizer: Any
    device: str


def resolve_dtype(dtype: str, device: str) -> Any:
    """The torch dtype for a ``--dtype`` name: ``auto`` is float32 on CPU, bfloat16 on CUDA."""
    import torch
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    return getattr(torch, dtype)


def emulated_on_this_cpu(torch_dtype: Any) -> bool:
    """Whether ``torch_dtype`` (bfloat16, float16) would be emulated on this x86 CPU: it
    reports neither AVX512-BF16 nor AMX (torch's CPU feature checks).  On such a CPU a
    bfloat16 pass costs about 3x a float32 one (BENCHMARKS.md, "neural")."""
    import torch
    checks = {torch.bfloat16: ("_is_avx512_bf16_supported", "_is_amx_tile_supported"),
              torch.float16: ("_is_amx_fp16_supported",)}.get(torch_dtype)
    if checks is None or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    found = [getattr(torch.cpu, name, None) for name in checks]
    return all(check is not None and not check() for check in found)


def check_device(device: str, name: str) -> None:
    """Refuse a ``--device`` that torch cannot compute on here, before a model is read: an
    unknown name (``gpu``), a CUDA device on a machine without a GPU or driver, an index past
    the devices there are (``cuda:1`` with one GPU), one that holds no data (``meta``).
    Probed by computing one number there and reading it back.

    Raises:
        ModelError: naming the device and torch's reason (``name``: the model, for the message).
    """
    import torch
    try:
        (torch.zeros(1, device=torch.device(device)) + 1).cpu()
    except (RuntimeError, ValueError, AssertionError, TypeError, NotImplementedError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(name, f"device {device!r} cannot be used here: {reason}",
                         stderr_tail=None) from None


def _check_path(path: str) -> None:
    """Refuse a path that is neither a ``.gguf`` file nor a model directory, saying which."""
    if not os.path.exists(path):
        raise ModelError(path, "no such model directory or .gguf file", stderr_tail=None)
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "config.json")):
        raise ModelError(path, "not a model directory (it has no config.json) nor a .gguf file",
                         stderr_tail=None)
    if os.path.isdir(path) and not any(os.path.exists(os.path.join(path, name))
                                       for name in TOKENIZER_FILES):
        raise ModelError(path, "the model directory has no tokenizer (tokenizer.json, or the "
                         "files a fast tokenizer is made from)", stderr_tail=None)
    if os.path.isfile(path) and _first_bytes(path) != GGUF_MAGIC:
        raise ModelError(path, "not a .gguf file (it does not start with the bytes GGUF) nor a "
                         "model directory", stderr_tail=None)


GGUF_MAGIC = b"GGUF"
"""The first four bytes of every GGUF file (the GGUF specification, "File Structure")."""


def _first_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(len(GGUF_MAGIC))
    except OSError:
        return b""      # unreadable: loading it says why


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "vocab.txt", "tiktoken.model")
"""Files one of which a model directory's tokenizer is read from (transformers'
``AutoTokenizer``): without any, it fails with a paragraph about sentencepiece and tiktoken."""


_LOAD_ERRORS = (OSError, ValueError, ImportError, KeyError, struct.error)
"""What transformers raises for a model it cannot read (``struct.error``: a GGUF file cut
short, read past its end)."""


class _Truncated(ValueError):
    """A ``.gguf`` file cut inside its tensors' data (:func:`_truncation_said`); its message
    is ours, shown as it is."""


def _reason(error: BaseException) -> str:
    """Why a model could not be read, in one line."""
    if isinstance(error, _Truncated):
        return str(error)
    if isinstance(error, struct.error):
        return f"the file ends too soon: truncated, or not a GGUF file ({first_line(error)})"
    return first_line(error)


@contextlib.contextmanager
def _location(path: str) -> Iterator[tuple[str, dict[str, str]]]:
    """``from_pretrained``'s directory and extra arguments for a directory or ``.gguf`` file.

    A ``.gguf`` file is given in a temporary directory that holds only a link to it:
    ``from_pretrained(folder, gguf_file=...)`` takes a ``tokenizer.json`` in the file's own
    folder over the GGUF's tokenizer, so another model's files beside it changed the
    answers silently."""
    if os.path.isdir(path):
        yield path, {}
        return
    with tempfile.TemporaryDirectory(prefix="lmc-gguf-") as alone, _gguf_parsed_once():
        name = os.path.basename(path)
        os.symlink(os.path.abspath(path), os.path.join(alone, name))
        yield alone, {"gguf_file": name}


_GGUF_PATCHED = threading.Lock()
"""Held while :func:`_gguf_parsed_once` has replaced gguf's functions: two loads in one
process (an in-process model in each of a Dask worker's threads) would otherwise restore
each other's replacements."""


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Within it, each ``.gguf`` file is parsed once and each tensor-name map built once.

    transformers parses a GGUF file three times per load (``gguf.GGUFReader`` for the
    configuration, the tokenizer and the weights: 3.4 s each for SmolLM2-135M on the 2-core
    machine) and builds gguf's tensor-name map once per module of the model (397 times,
    4.9 s); with this, SmolLM2-135M's :func:`load` takes 6.5 s instead of 15.5 s, the same
    weights (BENCHMARKS.md, "neural": 9-10 s instead of 18 s to the first answer).
    transformers imports both from ``gguf`` inside the functions that use them, so they are
    replaced there for the duration (a reader is shared only for a file opened read-only,
    mode ``r``); a transformers that binds them elsewhere loads as before, only slower.
    Without the gguf package nothing is replaced."""
    try:
        import gguf
    except ImportError:
        yield
        return
    with _GGUF_PATCHED:
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader = _memoised(_truncation_said(reader), lambda path, mode="r": (
            (os.fspath(path), mode) if mode == "r" else None))
        gguf.get_tensor_name_map = _memoised(name_map, lambda arch, n_blocks: (arch, n_blocks))
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _truncation_said(reader: Callable[..., Any]) -> Callable[..., Any]:
    """gguf's ``GGUFReader``, saying a file cut inside its tensors' data is: the reader
    views each tensor's bytes in the file and shapes them as its header says (numpy's
    ``cannot reshape array of size 1214336 into shape (49152,612)`` where fewer bytes are
    left: QA, an interrupted download)."""
    def read(*args: Any, **kwargs: Any) -> Any:
        try:
            return reader(*args, **kwargs)
        except ValueError as error:
            if not str(error).startswith("cannot reshape array"):
                raise
            raise _Truncated("the file ends too soon, inside its tensors' data: truncated (an "
                             f"interrupted download?) ({first_line(error)})") from error
    return read


def _memoised(function: Callable[..., Any], key: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, answering again what it answered for the same ``key(*args)`` (None:
    not kept); what it raises is raised each time."""
    answers: dict[Any, Any] = {}

    def memoised(*args: Any, **kwargs: Any) -> Any:
        known = key(*args, **kwargs)
        if known is None:
            return function(*args, **kwargs)
        if known not in answers:
            answers[known] = function(*args, **kwargs)
        return answers[known]
    return memoised


def load(path: str, device: str = "cpu", dtype: str = "auto", random_weights: bool = False) -> Loaded:
    """Load ``path`` (a model directory or a ``.gguf`` file) for inference.

    With ``random_weights``, only the configuration and tokenizer are read (a directory
    that :func:`save_skeleton` wrote is enough) and the weights are drawn at random (torch
    seed 0, the architecture's own initialisation): the speed of the real model, answers
    that mean nothing.  For measuring on machines the weights cannot travel to.

    Raises:
        ModelError: the path is not a model directory or ``.gguf`` file, transformers cannot
            load it, or torch cannot compute on ``device`` here (:func:`check_device`).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    _check_path(path)
    check_device(device, path)
    try:
        torch_dtype = resolve_dtype(dtype, device)
    except ValueError as e:
        raise ModelError(path, str(e), stderr_tail=None) from None
    if device == "cpu" and emulated_on_this_cpu(torch_dtype):
        logging.getLogger(__name__).warning(
            "%s: this CPU has no %s, so %s is emulated: expect it to be several times slower "
            "than float32 (--dtype float32)", path,
            "AMX-FP16" if torch_dtype == torch.float16 else "AVX512-BF16 or AMX", dtype)
    try:
        with _location(path) as (where, extra):
            tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True, **extra)
            if random_weights:
                config = AutoConfig.from_pretrained(where, local_files_only=True, **extra)
                torch.manual_seed(0)
                model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
            else:
                with _load_report_quiet():
                    model, info = AutoModelForCausalLM.from_pretrained(   # (mismatched:
                        where, local_files_only=True, dtype=torch_dtype,   # said below)
                        output_loading_info=True, ignore_mismatched_sizes=True, **extra)
                check_weights(path, info)
    except _LOAD_ERRORS as e:
        raise ModelError(path, f"cannot load the model: {_reason(e)}", stderr_tail=None) from None
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(path, "the tokenizer is not a fast (tokenizers) tokenizer",
                         stderr_tail=None)
    model.to(device)
    model.eval()
    return Loaded(model, tokenizer, device)


def check_weights(path: str, info: dict[str, Any]) -> None:
    """Refuse a model whose files do not hold every weight its configuration has
    (``from_pretrained``'s ``output_loading_info``): transformers draws the missing ones at
    random and goes on, so the answers meant nothing and changed from run to run (QA: a
    config.json of more layers than the weights, a checkpoint saved without its output
    layer).

    Raises:
        ModelError: naming how many weights are missing or of another shape, and one.
    """
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(key if isinstance(key, str) else key[0]
                        for key in info.get("mismatched_keys") or [])
    if missing or mismatched:
        what = (f"{len(missing)} weights of its configuration are not in its files (such as "
                f"{missing[0]})" if missing else f"{len(mismatched)} weights in its files are "
                f"not of its configuration's shape (such as {mismatched[0]})")
        raise ModelError(path, f"{what}: transformers would draw them at random, and the "
                         "answers would mean nothing (a config.json of another model?)",
                         stderr_tail=None)


@contextlib.contextmanager
def _load_report_quiet() -> Iterator[None]:
    """transformers' warnings off while a model loads: its load report lists missing and
    unexpected weights in some fifty lines, which :func:`check_weights` says in one."""
    from transformers.utils import logging as hf_logging
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def save_skeleton(path: str, out_dir: str) -> list[str]:
    """Write the configuration and tokenizer of ``path`` (a directory or ``.gguf`` file),
    without weights, to ``out_dir`` (a few MB: what :func:`load` with ``random_weights``
    needs).

    Returns:
        the names of the files in ``out_dir`` afterwards.
    Raises:
        ModelError: ``path`` cannot be read.
    """
    from transformers import AutoConfig, AutoTokenizer
    _check_path(path)
    try:
        with _location(path) as (where, extra):
            config = AutoConfig.from_pretrained(where, local_files_only=True, **extra)
            tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True, **extra)
    except _LOAD_ERRORS as e:
        raise ModelError(path, f"cannot read the model: {_reason(e)}", stderr_tail=None) from None
    os.makedirs(out_dir, exist_ok=True)
    config.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return sorted(os.listdir(out_dir))


def save_unpacked(path: str, out_dir: str) -> list[str]:
    """Write ``path`` (a ``.gguf`` file, or a model directory) to ``out_dir`` as a model
    directory: the weights as :func:`load` gives them (a GGUF's dequantised by transformers,
    float32 safetensors), the configuration (without the GGUF's quantisation entry) and the
    tokenizer.  Loaded from there, the model has the same weights, so gives the same
    answers, but starts in seconds: a GGUF's weights are dequantised on every load
    (BENCHMARKS.md, "neural": SmolLM2-135M 9-10 s to the first answer, 6 s from the
    directory, the same day on the 2-core machine).

    Returns:
        the names of the files in ``out_dir`` afterwards.
    Raises:
        ModelError: ``path`` cannot be loaded, or ``out_dir`` written.
    """
    import copy

    import torch
    from transformers import AutoModelForCausalLM
    loaded = load(path, dtype="float32")
    config = copy.deepcopy(loaded.model.config)
    if hasattr(config, "quantization_config"):  # a GGUF's: "not serializable" as loaded
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.model.state_dict(), strict=True)
    try:
        os.makedirs(out_dir, exist_ok=True)
        plain.save_pretrained(out_dir)
        loaded.tokenizer.save_pretrained(out_dir)
        _umask_modes(out_dir)
    except OSError as e:
        raise ModelError(path, f"cannot write {out_dir}: {e.strerror or e}",
                         stderr_tail=None) from None
    return sorted(os.listdir(out_dir))


def _umask_modes(directory: str) -> None:
    """Give the files in ``directory`` the mode a new file gets (``0666`` less the umask):
    safetensors writes the weights readable by their owner only (0600), which a cluster's
    workers running as another user (the compose cluster's uid 1000) could not read."""
    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isfile(path) and not os.path.islink(path):
            os.chmod(path, 0o666 & ~umask)
