"""A deterministic toy model speaking the LM Challenge line protocol, for tests.

Usage: python toy_model.py [--mode normal|exit|hang|garbage|flood|silent-exit|answer|trickle|
                             close-stdout|twice] [--after N] [--at-exit TEXT]

normal: predict without candidates -> a fixed word list filtered by the typed prefix,
        scores -1, -2, ...; with candidates -> score -(len(candidate) + len(context) % 3),
        leaving out candidates that contain "q" (out of vocabulary); train/clear adapt a
        set of trained words that then score 0.
--delay sleeps per predict; --count-file F appends each predict's context to F.PID; --crash-if-exists F makes it exit with code 3 on a context
containing --crash-word while F exists.
The other modes behave normally for N predicts, then: exit with code 3 (exit), stop
answering (hang), answer a malformed line (garbage); flood writes 100 kB to stderr before each
answer; silent-exit exits with code 0; answer writes --answer (with \\t for TAB) instead of
its answer; trickle writes its answer one byte every --delay seconds; close-stdout closes its
standard output and sleeps for an hour; twice writes each answer twice (the copy --delay
seconds after the answer).
--at-exit TEXT writes TEXT as a line to standard output when its input ends.
--exit-code N: when its input ends, write "saving state failed" to stderr and exit with code N.
--misbehave-if-exists F: --mode, --at-exit and --exit-code only if F exists when the model
starts.
--stderr-bytes B writes B bytes of lines to stderr before each answer (any mode), and
--tally FILE the number of bytes it wrote to stderr to FILE when its input ends.
--pause-while-exists F: at its (--after N)th predict, before answering, wait while F exists
(any mode), if it is the first model process to get there: the one that creates F + ".paused"
(a test then knows one model is mid-partition, and the others go on).
"""

import argparse
import os
import sys

WORDS = ["the", "and", "of", "to", "that", "in", "he", "shall", "unto", "for", "i", "his",
         "a", "lord", "they", "be", "is", "him", "not", "them"]


def pause(gate: str) -> None:
    """Wait while ``gate`` exists if this is the first process to get here (the one that
    creates ``gate + ".paused"``)."""
    import time
    if not os.path.exists(gate):
        return
    try:
        os.close(os.open(gate + ".paused", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    while os.path.exists(gate):
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="normal")
    parser.add_argument("--after", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to sleep per predict")
    parser.add_argument("--crash-if-exists", default=None,
                        help="while this file exists, exit with code 3 on --crash-word")
    parser.add_argument("--crash-word", default="Jesus")
    parser.add_argument("--count-file", default=None,
                        help="append each predict's context, one line per request, to this "
                             "file name + '.' + the process id (flushed at once)")
    parser.add_argument("--answer", default="", help="the answer line of --mode answer")
    parser.add_argument("--stderr-bytes", type=int, default=0)
    parser.add_argument("--tally", default=None)
    parser.add_argument("--at-exit", default=None)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--pause-while-exists", default=None)
    parser.add_argument("--misbehave-if-exists", default=None,
                        help="--mode, --at-exit and --exit-code only if this file exists when "
                             "it starts")
    args = parser.parse_args()
    if args.misbehave_if_exists and not os.path.exists(args.misbehave_if_exists):
        args.mode, args.at_exit, args.exit_code = "normal", None, 0
    counted = open(f"{args.count_file}.{os.getpid()}", "a", encoding="utf-8") if args.count_file else None
    trained: set[str] = set()
    answered = 0
    written = 0  # bytes to stderr by --stderr-bytes
    out = sys.stdout
    for line in sys.stdin:
        parts = line.rstrip("\n").split("\t")
        command = parts[0]
        if command == "train":
            trained.update(parts[1].lower().split())
            continue
        if command == "clear":
            trained.clear()
            continue
        if command != "predict":
            sys.stderr.write(f"unknown command {command!r}\n")
            continue
        if args.pause_while_exists and answered == args.after:
            pause(args.pause_while_exists)
        if answered >= args.after:
            if args.mode == "exit":
                sys.stderr.write("toy model: giving up\n")
                sys.exit(3)
            if args.mode == "silent-exit":
                sys.exit(0)
            if args.mode == "hang":
                sys.stderr.write("toy model: hanging\n")
                sys.stderr.flush()
                import time
                time.sleep(3600)
            if args.mode == "close-stdout":
                import time
                sys.stdout.flush()
                os.close(1)
                time.sleep(3600)
            if args.mode == "answer":
                out.write(args.answer.replace("\\t", "\t") + "\n")
                out.flush()
                answered += 1
                continue
            if args.mode == "garbage":
                out.write("this is not\ta score\textra\n")
                out.flush()
                answered += 1
                continue
        if args.mode == "flood":
            sys.stderr.write(("noise " * 170 + "\n") * 100)
        if args.stderr_bytes:
            line = "x" * 99 + "\n"
            sys.stderr.write(line * (args.stderr_bytes // 100) + "y" * (args.stderr_bytes % 100))
            sys.stderr.flush()
            written += args.stderr_bytes
        context = parts[1] if len(parts) > 1 else ""
        if counted is not None:
            counted.write(context + "\n")
            counted.flush()
        if args.crash_if_exists and args.crash_word in context:
            if os.path.exists(args.crash_if_exists):
                sys.stderr.write(f"toy model: crashing on {args.crash_word!r}\n")
                sys.exit(3)
        if args.delay and args.mode not in ("trickle", "twice"):
            import time
            time.sleep(args.delay)
        candidates = parts[2:]
        if candidates:
            pairs = [(c, 0.0 if c.lower() in trained else -(len(c) + len(context) % 3))
                     for c in candidates if "q" not in c]
        else:
            prefix = context.split(" ")[-1] if not context.endswith(" ") else ""
            pairs = [(w[len(prefix):], -1.0 - i) for i, w in enumerate(WORDS)
                     if w.startswith(prefix) and len(w) > len(prefix)]
        answer = "\t".join(f"{w}\t{s}" for w, s in pairs) + "\n"
        if args.mode == "trickle" and answered >= args.after:
            import time
            for char in answer:
                out.write(char)
                out.flush()
                time.sleep(args.delay)
        else:
            out.write(answer)
            out.flush()
            if args.mode == "twice" and answered >= args.after:
                import time
                time.sleep(args.delay)
                out.write(answer)
                out.flush()
        answered += 1
    if args.at_exit is not None:
        out.write(args.at_exit + "\n")
        out.flush()
    if args.tally:
        with open(args.tally, "w") as f:
            f.write(str(written))
    if args.exit_code:
        sys.stderr.write("saving state failed\n")
        sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
