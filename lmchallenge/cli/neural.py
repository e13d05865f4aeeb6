"""The ``lmc-neural`` command: a causal LM (model directory or ``.gguf``) over the line protocol.

Examples::

    lmc run "lmc-neural serve models/SmolLM2-135M-Instruct.Q4_1.gguf" we data/kjv/test.sample.txt
    lmc run --window 2048 "lmc-neural serve ./my-model --device cuda --batch-size 16" we data.txt
    lmc-neural unpack models/SmolLM2-135M-Instruct.Q4_1.gguf models/smollm2  # starts faster
    lmc-neural serve models/smollm2 --device cuda --listen /tmp/smol.sock &   # one for all:
    lmc-dist run "lmc-neural connect /tmp/smol.sock" we --input data.txt --run-dir runs/smol

The server reads what requests have arrived, answers the ``predict`` lines among them in
batched calls (up to the model's ``predict_batch_size`` scoring queries with at most
:data:`BATCH_CANDIDATES` candidates in all, or one completion search, a call)
(:meth:`lmchallenge.model.neural.adapter.CausalLM.predict_batch`: the queries of one line,
and the lines of a call, share their forward passes), and writes the answers in one go.
``train`` and ``clear`` are read and ignored (the model does not adapt).  A refused query (a
``ce`` character query) stops the server with the reason on stderr and exit code 2, so the
client reports it instead of logging empty answers.  With ``--listen`` one server answers
every client that connects, their queries sharing its calls
(:mod:`lmchallenge.model.shared`; ``connect`` is the clients' model command).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from lmchallenge import tuning
from lmchallenge.cli.options import MAX_SECONDS, FiniteFloatRange, count, not_empty, run_command
from lmchallenge.errors import LmcError
from lmchallenge.model.neural import REFUSED_GAMES, install_hint, missing_modules
from lmchallenge.model import shared
from lmchallenge.model.batched import BATCH_CANDIDATES, serve_batched
from lmchallenge.model.serve import refused_game
from lmchallenge.model.spec import started

CHUNK = 32  # as lmchallenge.model.neural.adapter.CHUNK (not imported here: it imports torch)
SEARCH_WIDTH = 16  # as lmchallenge.model.neural.adapter.SEARCH_WIDTH (the same reason)
BATCH_SIZE = 4  # as lmchallenge.model.neural.adapter.BATCH_SIZE (the same reason)
MAX_THREADS = 1024
"""The most ``--threads`` (QA: torch crashed, a segmentation fault, at 100,000)."""


@click.group()
@click.version_option(package_name="lmchallenge-dist")
def cli() -> None:
    """Causal transformer language models (Hugging Face directories or GGUF files) for LM
    Challenge: whole-word probabilities and completions from subword tokens."""


def needs_the_extra(command: Callable[..., None]) -> Callable[..., None]:
    """Refuse to run ``command`` without the neural extra's modules, saying how to install
    them (its ``--help`` is shown without them: it is checked when the command runs)."""

    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> None:
        missing = missing_modules()
        if missing:
            raise LmcError(install_hint(missing))
        command(*args, **kwargs)

    return checked


def refuse_the_game() -> None:
    """Raise :class:`LmcError` if the game ``lmc run`` or ``lmc-dist`` names in the
    environment is one the neural model does not play (``ce``: :data:`REFUSED_GAMES`)."""
    why = refused_game(REFUSED_GAMES)
    if why:
        raise LmcError(why)


@cli.command()
@click.argument("model", type=click.Path(exists=True))
@click.option("--device", default="cpu", show_default=True,
              help="Torch device: cpu, cuda or cuda:N.")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
              default="auto", show_default=True,
              help="Weights and activations: auto is float32 on CPU, bfloat16 on CUDA (on a "
                   "CPU with AVX512-BF16 or AMX, bfloat16 is 2-3x faster; without them it is "
                   "emulated, several times slower, and a warning says so).")
@click.option("--batch-size", type=count(1), default=BATCH_SIZE,
              show_default=True,
              help="Sequences per forward pass (every pass has this many rows; answers "
                   "depend on it only through rounding). The server answers 64 x N scoring "
                   "queries a call, from the requests the client has sent: its default "
                   "--window 256 fills 4 rows; give it --window 128 x N for more (on a GPU: "
                   "--batch-size 16 --window 2048).")
@click.option("--chunk", type=count(1), default=CHUNK, show_default=True,
              help="Tokens per forward-pass row.")
@click.option("--top", type=count(0), default=20, show_default=True,
              help="Words returned for a query without candidates (wc counts up to 20).")
@click.option("--max-expansions", type=count(2), default=64, show_default=True,
              help="Token paths the completion search may expand per wc query (the first is "
                   "the context itself: 2 finds one word).")
@click.option("--search-width", type=count(1), default=SEARCH_WIDTH,
              show_default=True,
              help="Token paths the completion search expands together, in one forward pass.")
@click.option("--threads", type=count(1, MAX_THREADS), default=None,
              help="CPU threads of torch [default: one per core].")
@click.option("--start-token", default=None,
              help="The token every text starts with [default: the tokenizer's BOS, else EOS].")
@click.option("--random-weights", is_flag=True,
              help="MODEL's architecture and tokenizer with random weights (a directory "
                   "from `lmc-neural skeleton` will do): for speed measurements only.")
@click.option("--listen", metavar="ADDRESS", default=None,
              help="Serve any number of clients at ADDRESS (a Unix socket's path, or "
                   "HOST:PORT) instead of stdin/stdout, until stopped (Ctrl-C, SIGTERM): one "
                   "copy of the model for many lmc-dist workers, whose model command is "
                   "`lmc-neural connect ADDRESS`; their queries share the passes. No "
                   "authentication: a Unix socket or a trusted network only.")
@needs_the_extra
def serve(model: str, device: str, dtype: str, batch_size: int, chunk: int, top: int,
          max_expansions: int, threads: int | None, start_token: str | None,
          random_weights: bool, search_width: int, listen: str | None) -> None:
    """Answer predict/train/clear requests on stdin/stdout (LM Challenge model protocol),
    or, with --listen, those of every client that connects."""
    refuse_the_game()     # before the model loads
    tuning.lift_own_limits()  # before torch is imported: its threads are its own choice
    options = dict(model=model, device=device, dtype=dtype, batch_size=batch_size, chunk=chunk,
                   top=top, max_expansions=max_expansions, threads=threads,
                   start_token=start_token, random_weights=random_weights,
                   search_width=search_width)
    if listen is None:
        serve_batched(_loaded(options), sys.stdin.buffer, sys.stdout.buffer, sys.stderr)
        return
    # bound before the load (an address in use fails at once), listening after it (a
    # relay waits for a server still loading, and goes elsewhere if its load fails)
    with shared.listening(shared.address_of(listen)) as listener:
        lm = _loaded(options)
        sys.stderr.write(f"lmc-neural: serving {model} at {listen} (model command: "
                         f"lmc-neural connect {listen}); Ctrl-C stops it\n")
        sys.stderr.flush()
        shared.serve_shared(lm, listener, sys.stderr)


def _loaded(options: dict[str, Any]) -> Any:
    """The :class:`~lmchallenge.model.neural.adapter.CausalLM` of ``options`` (its keyword
    arguments; a failure to load it in one line, as lmc run says it)."""
    from lmchallenge.model.neural.adapter import CausalLM
    return started(options["model"], CausalLM, options)


@cli.command()
@click.argument("addresses", nargs=-1, required=True, metavar="ADDRESS...")
@click.option("--wait", type=FiniteFloatRange(0, MAX_SECONDS), default=60.0,
              show_default=True,
              help="Seconds to wait for a server that is not listening yet (still loading).")
def connect(addresses: tuple[str, ...], wait: float) -> None:
    """The model command for a model served with `lmc-neural serve MODEL --listen ADDRESS`:
    pass the protocol's requests on stdin to it and its answers to stdout (`lmc run
    "lmc-neural connect ADDRESS" we ...`, or as lmc-dist's model, every worker sharing the
    one server). Given several servers' addresses (of the same model), an lmc-dist worker
    named N or NAME-N (the embedded cluster's: 0, 1, ...) takes the address N modulo their
    count, so that the workers are spread evenly; any other client one at random. If that
    server is not there after --wait, the others are tried in turn. Needs no torch: only
    the server loads the model."""
    refuse_the_game()
    every = [shared.address_of(address) for address in addresses]    # each checked
    shared.relay(shared.in_preference(every, os.environ.get(tuning.WORKER_VARIABLE)),
                 sys.stdin.buffer, sys.stdout.buffer, wait)


@cli.command()
@click.argument("model", type=click.Path(exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False), callback=not_empty)
@needs_the_extra
def skeleton(model: str, out_dir: str) -> None:
    """Write MODEL's configuration and tokenizer, without weights, to OUT_DIR: a few MB that
    `serve --random-weights OUT_DIR` runs at the real model's speed (for machines the
    weights cannot travel to)."""
    from lmchallenge.model.neural.loading import save_skeleton
    _written(out_dir, save_skeleton(model, out_dir))


@cli.command()
@click.argument("model", type=click.Path(exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False), callback=not_empty)
@needs_the_extra
def unpack(model: str, out_dir: str) -> None:
    """Write MODEL (a .gguf file) to OUT_DIR as a model directory, its weights dequantised
    (float32): the same answers, and `serve OUT_DIR` starts in seconds instead of reading
    and dequantising the GGUF at every start (worth it for lmc-dist's workers)."""
    from lmchallenge.model.neural.loading import save_unpacked
    _written(out_dir, save_unpacked(model, out_dir))


def _written(out_dir: str, names: list[str]) -> None:
    """Report the files written and end (see the comment below)."""
    size = sum(os.path.getsize(os.path.join(out_dir, name)) for name in names)
    sys.stderr.write(f"lmc-neural: {out_dir}: {', '.join(names)} ({size / 1e6:.1f} MB)\n")
    # transformers' GGUF reader imports triton, whose bindings print pages of nanobind "leaked"
    # reports when the interpreter shuts down: the work is done, so end without the shutdown
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``lmc-neural`` (see :func:`lmchallenge.cli.options.run_command`)."""
    run_command(cli, argv, "lmc-neural")


if __name__ == "__main__":
    main()
