"""A reproducibility signature for a figure from a log (``lmc stats --signature``), in the
style of sacrebleu's (``BLEU|nrefs:1|case:mixed|...|version:2.0.0``): ``|``-separated
``name:value`` fields, so that a number in a paper says how to get it again.

Fields: ``lmc:stats``, ``game`` (detected from the log), ``opts`` (the game's options),
``seed`` (the ``wr`` corruption seed), ``model`` (the predictor), ``mopts`` (its options:
the same class or command with other options is another model, QA), ``corpus`` (its sha256),
``vocab`` (the ``wr`` word list's sha256, ``-`` for the other games), ``train`` -- these from
the run directory's ``_manifest.json`` when the log is an ``lmc-dist`` run dir (``?`` when
unknown) -- ``tok`` (the tokenizer: the ``regex`` and
``emoji`` versions it depends on), ``version`` (``lmchallenge-dist``), and with intervals
``ci`` (method and level), ``nrs`` (resamples), ``rs`` (resampling seed) and ``unit``
(``user``: users, or messages where there are none).
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from typing import Any

MANIFEST = "_manifest.json"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def _manifest(path: str) -> dict[str, Any]:
    name = os.path.join(path, MANIFEST)
    if path != "-" and os.path.isfile(name):
        with open(name, encoding="utf-8") as f:
            return json.load(f)
    return {}


def _compact(value: Any) -> str:
    return "?" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def _vocabulary(manifest: dict[str, Any]) -> str:
    if manifest.get("vocabulary_sha256"):
        return f"sha256.{manifest['vocabulary_sha256']}"
    return "-" if manifest.get("game") not in (None, "wr") else "?"


def signature(path: str, game: str | None, settings: Any = None) -> str:
    """The signature of ``lmc stats`` figures of the log at ``path``.

    Args:
        path: the log (a run dir contributes its manifest's fields).
        game: the log's game (``wc``, ``we``, ``ce``, ``wr``; None if unknown).
        settings: the :class:`lmchallenge.stats.bootstrap.Settings` of its intervals, if any.
    """
    manifest = _manifest(path)
    versions = manifest.get("versions", {})
    fields = [("lmc", "stats"), ("game", game or "?"),
              ("opts", _compact(manifest.get("game_options")) if manifest else "?"),
              ("seed", str(manifest.get("seed")) if manifest.get("seed") is not None else "?"),
              ("model", manifest.get("predictor", "?")),
              ("mopts", _compact(manifest.get("predictor_options")) if "predictor_options" in manifest else "?"),
              ("corpus", f"sha256.{manifest['corpus_sha256']}" if manifest.get("corpus_sha256") else "?"),
              ("vocab", _vocabulary(manifest)),
              ("train", str(manifest["train"]).lower() if "train" in manifest else "?"),
              ("tok", f"regex.{versions.get('regex', _version('regex'))}+emoji.{versions.get('emoji', _version('emoji'))}"),
              ("version", versions.get("lmchallenge-dist", _version("lmchallenge-dist")))]
    if settings is not None:
        fields += [("ci", f"{settings.method}.{settings.confidence:g}"), ("nrs", str(settings.resamples)),
                   ("rs", str(settings.seed)), ("unit", "user")]
    return "|".join(f"{name}:{value}" for name, value in fields)
