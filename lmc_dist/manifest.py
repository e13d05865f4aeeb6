"""The run directory's ``_manifest.json``: what a run is and which partitions are finished.

It is rewritten atomically after every finished partition, so an interrupted run leaves an
accurate record and ``--resume`` runs only what is missing.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from lmchallenge.exceptions import LmcError
from lmchallenge.log import atomic_path

from .partition import Partition, ScanResult

MANIFEST = "_manifest.json"  # "_": pyarrow skips it when reading the run dir as a dataset
STATS = "_stats.json"
IDENTITY_KEYS = ("game", "game_options", "predictor", "corpus_sha256", "corpus_format",
                 "train", "partition_chars", "format")


def versions() -> dict[str, str]:
    """Versions of Python and of the packages that shape the results."""
    found = {"python": platform.python_version()}
    for package in ("lmchallenge-dist", "dask", "distributed", "numpy", "scipy", "pyarrow",
                    "regex", "emoji"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def new_manifest(*, game: str, game_options: dict, predictor: str, corpus: str,
                 scan: ScanResult, train: bool, partition_chars: int, out_format: str,
                 part_names: list[str]) -> dict[str, Any]:
    """A manifest with every partition pending."""
    return {
        "game": game, "game_options": game_options, "seed": game_options.get("seed"),
        "predictor": predictor, "corpus": corpus, "corpus_sha256": scan.sha256,
        "corpus_format": scan.corpus_format, "train": train, "partition_chars": partition_chars,
        "format": out_format, "messages": scan.messages, "characters": scan.characters,
        "versions": versions(), "started": now(), "finished": None,
        "partitions": [dict(p.to_json(), file=name, state="pending")
                       for p, name in zip(scan.partitions, part_names)],
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load(run_dir: str) -> dict[str, Any] | None:
    """The run dir's manifest, or None if it has none."""
    path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save(run_dir: str, manifest: dict[str, Any]) -> None:
    """Write the manifest atomically."""
    with atomic_path(os.path.join(run_dir, MANIFEST)) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")


def check_resumable(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse to resume a run with a different game, model, corpus or partitioning.

    Raises:
        LmcError: naming the first difference.
    """
    for key in IDENTITY_KEYS:
        if old.get(key) != new.get(key):
            raise LmcError(f"cannot resume: {key} differs from the run in this directory "
                           f"({old.get(key)!r} there, {new.get(key)!r} now); use a new --run-dir")
    # the same corpus and --partition-chars, cut otherwise (another version of lmc-dist): a
    # finished part file would stand for other lines
    if _cuts(old) != _cuts(new):
        raise LmcError("cannot resume: the corpus is cut into other partitions than the run in "
                       f"this directory ({len(old['partitions'])} partitions there, "
                       f"{len(new['partitions'])} now; written by lmc-dist "
                       f"{old.get('versions', {}).get('lmchallenge-dist', '?')}); "
                       "use a new --run-dir")


def _cuts(manifest: dict[str, Any]) -> list[tuple[int, int]]:
    return [(p["start"], p["end"]) for p in manifest["partitions"]]


def partitions_of(manifest: dict[str, Any]) -> list[Partition]:
    """The partitions recorded in ``manifest``."""
    fields = Partition.__dataclass_fields__
    return [Partition(**{k: p[k] for k in fields}) for p in manifest["partitions"]]


