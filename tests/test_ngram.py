"""Tests of the built-in n-gram model (lmchallenge/model/ngram.py, lmchallenge/cli/ngram.py).

Models are trained on the first 2,000 verses of the KJV Old Testament so the tests stay fast.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA, PYTHON, REFERENCE_LMC, lmc_command
from lmchallenge.errors import InputError, LmcError
from lmchallenge.model import ngram
from lmchallenge.model.ngram import NgramModel, load_tables, save_tables, train_tables
from lmchallenge.cli.ngram import main as ngram_main
from lmchallenge.tokenize import emoji_sequences, find_tokens, words

KJV_TRAIN = DATA / "kjv" / "train.txt.gz"
KJV_TEST = DATA / "kjv" / "test.sample.txt"
SLICE = 2000


@pytest.fixture(scope="module")
def kjv_lines() -> list[str]:
    with gzip.open(KJV_TRAIN, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(SLICE)]


@pytest.fixture(scope="module")
def word_tables(kjv_lines):
    return train_tables([words(line) for line in kjv_lines], order=3, unit="word")


@pytest.fixture(scope="module")
def char_tables(kjv_lines):
    return train_tables([list(line) for line in kjv_lines], order=4, unit="char")


@pytest.fixture(scope="module")
def corpus_file(kjv_lines, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "kjv2000.txt"
    path.write_text("".join(line + "\n" for line in kjv_lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def word_model_file(word_tables, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "kjv2000.lm"
    save_tables(word_tables, path)
    return path


@pytest.fixture()
def model(word_model_file) -> NgramModel:
    return NgramModel(model=str(word_model_file), top=20)


# A plain implementation of interpolated modified Kneser-Ney, to check the vectorised one ----

def reference_kneser_ney(lines: list[list[str]], order: int):
    """P(word | history) by the formulas of Chen & Goodman (1998), with dictionaries."""
    bos = ""
    raw = [Counter() for _ in range(order + 1)]
    for line in lines:
        seq = [bos, *line]
        for k in range(1, order + 1):
            for i in range(len(seq) - k + 1):
                gram = tuple(seq[i:i + k])
                if gram != (bos,):
                    raw[k][gram] += 1
    counts = [Counter() for _ in range(order + 1)]
    counts[order] = raw[order]
    for k in range(1, order):
        before = defaultdict(set)
        for gram in raw[k + 1]:
            before[gram[1:]].add(gram[0])
        for gram, c in raw[k].items():
            counts[k][gram] = c if gram[0] == bos else len(before[gram])

    def discounts(values):
        n = [sum(1 for v in values if v == r) for r in (1, 2, 3, 4)]
        if min(n) == 0:
            return (0.5, 1.0, 1.5)
        y = n[0] / (n[0] + 2 * n[1])
        return (1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2])

    d = {k: discounts(list(counts[k].values())) for k in range(1, order + 1)}
    totals = [defaultdict(float) for _ in range(order + 1)]
    mass = [defaultdict(float) for _ in range(order + 1)]
    for k in range(1, order + 1):
        for gram, c in counts[k].items():
            totals[k][gram[:-1]] += c
            mass[k][gram[:-1]] += d[k][min(c, 3) - 1]
    vocab_size = len(counts[1])

    def prob(word: str, history: tuple[str, ...]) -> float:
        history = history[max(0, len(history) - (order - 1)):] if order > 1 else ()
        k = len(history) + 1
        if k == 1:
            c = counts[1].get((word,), 0)
            lower = 1.0 / vocab_size
        else:
            c = counts[k].get((*history, word), 0)
            lower = prob(word, history[1:])
        total = totals[k].get(history, 0.0)
        if total == 0:
            return lower
        discounted = max(c - d[k][min(c, 3) - 1], 0.0) if c else 0.0
        return discounted / total + mass[k][history] / total * lower

    return prob


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_probabilities_match_a_plain_kneser_ney(kjv_lines, order):
    lines = [words(line) for line in kjv_lines[:300]]
    expected = reference_kneser_ney(lines, order)
    model = NgramModel(train_tables(lines, order=order))
    checked = 0
    for text in kjv_lines[:20] + kjv_lines[1500:1520]:
        tokens = words(text)
        position = 0  # the context is the text before the token, as the we game sends it
        for i, token in enumerate(tokens):
            position = text.index(token, position)
            answer = model.predict(text[:position], [token])
            position += len(token)
            if token not in model.tables.index:
                assert answer == []
                continue
            assert answer[0][0] == token
            want = math.log(expected(token, ("", *tokens[:i])))
            assert answer[0][1] == pytest.approx(want, abs=1e-9)
            checked += 1
    assert checked > 500


def test_character_probabilities_match_a_plain_kneser_ney(kjv_lines):
    lines = [list(line) for line in kjv_lines[:100]]
    expected = reference_kneser_ney(lines, 4)
    model = NgramModel(train_tables(lines, order=4, unit="char"))
    for text in kjv_lines[:3] + kjv_lines[1000:1003]:
        for i, char in enumerate(text):
            (found,) = model.predict(text[:i], [char])
            assert found[0] == char
            assert found[1] == pytest.approx(math.log(expected(char, ("", *text[:i]))), abs=1e-9)


# Normalisation -------------------------------------------------------------------------------

@pytest.mark.parametrize("context", ["", "In the ", "And God said unto ", "Jesus wept ",
                                     "And the LORD , "])
def test_word_probabilities_sum_to_one(model, context):
    vocabulary = model.tables.vocab[1:]
    answer = model.predict(context, vocabulary)
    assert len(answer) == len(vocabulary)
    assert math.fsum(math.exp(logp) for _, logp in answer) == pytest.approx(1.0, abs=1e-6)


def test_probabilities_with_a_cache_sum_to_one_over_vocabulary_and_cache(model):
    model.train("Jesus wept , and Lazarus slept in the tomb of Bethany")
    extra = sorted(set(model.cache.counts) - set(model.tables.vocab))
    assert extra == ["Bethany", "Jesus", "Lazarus", "tomb"]
    units = model.tables.vocab[1:] + extra
    for context in ["", "In the ", "And Jesus "]:
        answer = model.predict(context, units)
        assert len(answer) == len(units)
        assert math.fsum(math.exp(logp) for _, logp in answer) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("context", ["", "I", "In the beginnin", "zzz\u00e9"])
def test_character_probabilities_sum_to_one(char_tables, context):
    model = NgramModel(char_tables)
    chars = char_tables.vocab[1:]
    answer = model.predict(context, chars)
    assert sorted(c for c, _ in answer) == sorted(chars)
    assert math.fsum(math.exp(logp) for _, logp in answer) == pytest.approx(1.0, abs=1e-6)


def test_min_count_vocabulary_is_normalised_and_leaves_rare_words_out(kjv_lines):
    lines = [words(line) for line in kjv_lines[:500]]
    counts = Counter(w for line in lines for w in line)
    tables = train_tables(lines, order=3, min_count=3)
    assert tables.vocab[1:] == sorted(w for w, c in counts.items() if c >= 3)
    model = NgramModel(tables)
    rare = sorted(w for w, c in counts.items() if c == 1)[0]
    assert model.predict("And ", [rare, "the"])[0][0] == "the"
    assert len(model.predict("And ", [rare, "the"])) == 1
    # a history cut after a rare word is still a distribution over the vocabulary
    answer = model.predict(f"And {rare} ", tables.vocab[1:])
    assert math.fsum(math.exp(p) for _, p in answer) == pytest.approx(1.0, abs=1e-6)


# Prediction semantics ----------------------------------------------------------------------------

def test_prefix_completion_returns_suffixes_of_longer_vocabulary_words(model):
    answer = model.predict("I like bi", None)
    assert answer, "some words start with 'bi'"
    vocab = set(model.tables.vocab)
    for suffix, _ in answer:
        assert suffix and "bi" + suffix in vocab
    scores = [s for _, s in answer]
    assert scores == sorted(scores, reverse=True)
    # scores are the probabilities of the whole words
    whole = dict(model.predict("I like ", ["bi" + s for s, _ in answer]))
    for suffix, score in answer:
        assert score == pytest.approx(whole["bi" + suffix], abs=1e-12)


def test_completion_excludes_the_prefix_itself_and_is_the_best_matching_words(model):
    answer = model.predict("In the begin", None)
    assert ("ning", answer[0][1]) == answer[0]
    assert all(s for s, _ in answer)  # "begin" itself is not a completion
    candidates = [w for w in model.tables.vocab if w.startswith("begin") and w != "begin"]
    scored = sorted(model.predict("In the ", candidates), key=lambda p: (-p[1], p[0]))
    assert [("begin" + s, p) for s, p in answer] == scored[:20]


def test_next_word_predictions_are_top_n_with_ties_by_word(model):
    answer = model.predict("And God said unto ", None)
    assert len(answer) == 20
    assert [text for text, _ in answer[:3]] == ["him", "them", "his"]
    keys = [(-score, text) for text, score in answer]
    assert keys == sorted(keys)
    everything = sorted(model.predict("And God said unto ", model.tables.vocab[1:]),
                        key=lambda p: (-p[1], p[0]))
    assert answer == everything[:20]


def test_top_option(word_model_file):
    assert len(NgramModel(model=str(word_model_file), top=3).predict("In the ", None)) == 3
    assert NgramModel(model=str(word_model_file), top=0).predict("In the ", None) == []


def test_candidates_with_a_prefix_score_prefix_plus_candidate(model):
    (with_prefix,) = model.predict("In the begin", ["ning"])
    (whole,) = model.predict("In the ", ["beginning"])
    assert with_prefix == ("ning", whole[1])


def test_candidate_starting_a_new_token_after_the_prefix_treats_the_prefix_as_a_word(model):
    (after_word,) = model.predict("And God said", [","])
    (after_space,) = model.predict("And God said ", [","])
    assert after_word == (",", after_space[1])


def test_out_of_vocabulary_candidates_are_omitted(model):
    answer = model.predict("In the ", ["Jesus", "beginning", "zzyzx", ""])
    assert [c for c, _ in answer] == ["beginning"]
    assert model.predict("In the ", []) == []


def test_multi_token_candidate_is_the_product_of_its_tokens(model):
    (both,) = model.predict("And God ", ["said unto"])
    (first,) = model.predict("And God ", ["said"])
    (second,) = model.predict("And God said ", ["unto"])
    assert both[1] == pytest.approx(first[1] + second[1], abs=1e-12)


def test_history_is_only_the_current_line_and_long_contexts_agree(model, kjv_lines):
    text = kjv_lines[1234]
    tokens = words(text)
    cut = text.rindex(tokens[-2])
    long_context = " ".join(kjv_lines[1000:1010]) + " " + text[:cut]
    # a long context with the same last words gives the same answer as the short one
    short = " ".join(tokens[-4:-2]) + " "
    assert model.predict(long_context, None) == model.predict("x " + short, None)



def test_a_served_sequence_of_contexts_is_answered_as_each_context_alone(word_model_file,
                                                                         kjv_lines):
    """The history kept from one context to the next (a line's words tokenized only where
    the context grew) gives what tokenizing each context from scratch gives."""
    line = kjv_lines[77]
    contexts = [line[:i] for i in range(len(line) + 1)]           # wc: every character
    contexts += [line[:m.end()] + " " for m in ngram.word_tokenizer().finditer(line)]
    contexts += ["", "And God saw", "And  God\u00a0saw the ", "And God saw the light ",
                 "Und Gött sah das ", "Und Gött sah das Licht, ", "a\u3000b c ", "a\u3000b c d ",
                 "And God saw the light ", "God saw the light ", "God saw the light, that "]
    served = NgramModel(word_model_file)
    for context in contexts:
        for candidates in (None, ["light", "it", ",", "Gött"]):
            alone = NgramModel(word_model_file).predict(context, candidates)
            assert served.predict(context, candidates) == alone, (context, candidates)



def test_contexts_inside_an_emoji_spelled_with_spaces_are_tokenized_whole(tmp_path):
    """A previous context that ended at the space inside "👍 🏽" is no place to go on from
    (found by QA: the history became "👍", "🏽" after "great 👍 ")."""
    lines = ["great 👍 🏽 job here", "great 👍 job there", "a 👍 🏽 b 👍 🏽 c",
             "wow 👨 \u200d 👩 \u200d 👧 family time", "👍 🏽 👍 🏽 👍 🏽", "# \ufe0f \u20e3 1 2 3"]
    path = tmp_path / "emoji.lm"
    save_tables(train_tables([words(line) for line in lines], order=3), path)
    contexts = ["great 👍 ", "great 👍 🏽 ", "great 👍 🏽", "great 👍 🏽 job ", "a 👍 🏽 b 👍 ",
                "a 👍 🏽 b 👍 🏽 ", "wow 👨 ", "wow 👨 \u200d ", "wow 👨 \u200d 👩 \u200d 👧 ",
                "# ", "# \ufe0f ", "# \ufe0f \u20e3 ", "👍 ", "👍 🏽 👍 🏽 👍 "]
    served = NgramModel(path)
    for context in contexts:
        for candidates in (None, ["job", "there", "family", "👍 🏽", "1"]):
            alone = NgramModel(path).predict(context, candidates)
            assert served.predict(context, candidates) == alone, (context, candidates)
    # and each is what a history from the whole context's tokens gives
    model = NgramModel(path)
    assert model._split("great 👍 🏽 ") == (["great", "👍 🏽"], "")
    assert model._split("great 👍 🏽") == (["", "great"], "👍 🏽")
    assert model._split("x great 👍 ") == (["great", "👍"], "")



def whole_context_split(context: str, need: int) -> tuple[list[str], str]:
    """The last ``need`` history units and the prefix, from the whole context's tokens."""
    matches = list(ngram.word_tokenizer().finditer(context))
    prefix = matches.pop().group() if matches and matches[-1].end() == len(context) else ""
    units = ["", *(m.group() for m in matches)]
    return units[max(0, len(units) - need):], prefix


@pytest.mark.parametrize("seed", range(4))
def test_contexts_of_lines_of_spaced_emoji_split_as_whole_contexts(word_model_file, seed):
    """Each context of random lines of emoji spelled with spaces, their pieces, words and
    spaces (some lines without spaces: stretches longer than LONG_STRETCH), walked as wc and
    we do, splits as its whole tokenization does."""
    rng = random.Random(seed)
    spaced = [e for e in emoji_sequences() if " " in e]
    pieces = [*rng.sample(spaced, 40), "👍", "🏽", "\u200d", "👨", "👧", "#", "\ufe0f", "\u20e3",
              "word", "a", ",", "x1"]
    model = NgramModel(word_model_file)
    need = model.tables.order - 1
    for _ in range(30):
        if rng.random() < 0.3:      # no whitespace at all
            line = "".join(rng.choice(pieces).replace(" ", "") for _ in range(rng.randrange(1, 60)))
        else:
            line = "".join(rng.choice(pieces) + rng.choice([" ", " ", "  ", ""])
                           for _ in range(rng.randrange(1, 40)))
        contexts = [line[:i] for i in range(len(line) + 1)]
        contexts += [line[:m.end()] + " " for m in ngram.word_tokenizer().finditer(line)]
        for context in contexts:
            history, prefix = model._split(context)
            assert (history[max(0, len(history) - need):], prefix) == \
                whole_context_split(context, need), (line, context)


def test_a_line_of_spaced_emoji_is_tokenized_in_linear_time(word_model_file, monkeypatch):
    """Every space of a line of family emoji may be inside one: each context was tokenized
    from the line's start (2,000 of them: 3.7 s against 0.1 s for other lines)."""
    family = next(e for e in emoji_sequences() if e.count(" ") >= 4)
    line = " ".join([family] * 400)
    scanned = []
    tokenizer = ngram.word_tokenizer()

    class Counting:
        def finditer(self, string, pos=0):
            scanned.append(len(string) - pos)
            return tokenizer.finditer(string, pos)

        def findall(self, string, pos=0):
            scanned.append(len(string) - pos)
            return tokenizer.findall(string, pos)

    model = NgramModel(word_model_file)
    monkeypatch.setattr(model, "_tokenizer", Counting())
    for token in find_tokens(line, tokenizer):          # we, then wc's typing in one token
        model.predict(line[:token.character], [token.target])
    for i in range(len(line) // 2, len(line) // 2 + 60):
        model.predict(line[:i], None)
    assert sum(scanned) < 20 * len(line)     # from the start each time: about 200 times
    # nor a line without whitespace (emoji written without spaces: QA, 375 s for 2,000 of
    # "👨‍👩‍👧"), each context of which was tokenized from the line's start
    scanned.clear()
    joined = family.replace(" ", "") * 300
    for token in find_tokens(joined, tokenizer):
        model.predict(joined[:token.character], [token.target])
    assert sum(scanned) < 20 * len(joined)
    # a long context after a short one of the same line is tokenized near its end, not from
    # the short one's anchor (QA: 0.13 s a query after 20,000 words)
    short = "👍 🏽 " + "x " * 10 + "👍 🏽"
    long = short + " word" * 5000 + " 👍 🏽"
    for _ in range(5):
        model.predict(short, None)
        scanned.clear()
        model.predict(long, None)
        assert sum(scanned) < 1000


def test_the_remembered_answers_hold_no_long_text(word_model_file):
    """A long unknown word in the history, or a long word typed one character at a time, is
    not kept by the model's memos (QA: 66 MB for 30,000 histories of a 2,000-character
    blob; 73 MB for the prefixes of a 12,000-character word)."""
    import tracemalloc
    model = NgramModel(word_model_file)
    word = "x" * 3000
    model.predict("And God said ", None)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(0, len(word), 7):
        model.predict("And God said " + word[:i], None)
        model.predict(f"said {word[:i]} ", ["light"])
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert model._top_of.cache_info().currsize <= ngram.TOP_MEMO_PREFIX + 1
    assert model._rows_of.cache_info().currsize <= 4
    assert kept < 256 * 1024    # the 429 prefixes and histories as text: more than 1 MB


# Cache ---------------------------------------------------------------------------------------

def test_train_raises_a_word_and_clear_restores_it_exactly(model):
    before = model.predict("And he ", ["wept", "said"])
    before_top = model.predict("And he w", None)
    assert before_top[0][0] != "ept"
    model.train("And he wept , he wept sore .")
    after = dict(model.predict("And he ", ["wept", "said"]))
    assert after["wept"] > dict(before)["wept"]
    assert after["said"] < dict(before)["said"]
    after_top = [s for s, _ in model.predict("And he w", None)]
    assert after_top.index("ept") < [s for s, _ in before_top].index("ept")
    model.clear()
    assert model.predict("And he ", ["wept", "said"]) == before
    assert model.predict("And he w", None) == before_top


def test_cache_makes_a_new_word_scorable_and_predictable(model):
    assert model.predict("And ", ["Jesus"]) == []
    model.train("Jesus wept")
    (found,) = model.predict("And ", ["Jesus"])
    assert found[0] == "Jesus" and found[1] < 0
    for _ in range(30):
        model.train("Jesus Jesus Jesus")
    assert "esus" in [s for s, _ in model.predict("And J", None)]
    model.clear()
    assert model.predict("And ", ["Jesus"]) == []


def test_the_cache_as_completions_read_it_is_kept_in_step_with_train(model, kjv_lines):
    """The user cache's view for completions, updated a message at a time, equals one made
    from the whole cache, whether made before the messages or after (units in and outside
    the vocabulary, new and seen again), and is made again after clear."""
    model.predict("And the ", None)         # no cache yet: no view
    model.train(kjv_lines[5])
    model.predict("And the L", None)        # the view made, then kept in step
    for line in kjv_lines[200:260] + ["Lol Lollard Lolly Lolly Lxx", "Lolly Lzz Lol-cat Lol"]:
        model.train(line)
    fresh = ngram._CacheView()
    fresh.add(model.cache.counts, model.tables.index)
    kept = model._cache_view()
    assert kept.ids.tolist() == fresh.ids.tolist() and len(kept.ids) > 300
    assert kept.counts.tolist() == fresh.counts.tolist()
    assert kept.outside == fresh.outside == sorted(set(kept.outside)) and len(kept.outside) >= 6
    assert kept.outside_counts == fresh.outside_counts
    assert kept.by_count == fresh.by_count == sorted(kept.by_count)
    assert dict(zip(kept.outside, kept.outside_counts))["Lolly"] == 3
    assert kept.best_outside("", 2) == [("Lolly", 3), ("Lol", 2)]
    assert kept.best_outside("Lol", 3) == [("Lolly", 3), ("Lol-cat", 1), ("Lollard", 1)]
    model.clear()
    assert model._cache_view().outside == [] and not len(model._cache_view().ids)


def test_cached_top_n_equals_brute_force(model, kjv_lines):
    for line in kjv_lines[100:140]:
        model.train(line)
    for _ in range(3):      # units outside the vocabulary: one equal to a prefix typed
        model.train("Lol Lollard Lolly Lolly Lolly Lxx Lxx Lol-cat Lzz")
    assert {"Lol", "Lollard", "Lxx"} <= set(model.cache.counts) - set(model.tables.vocab)
    vocabulary = sorted(set(model.tables.vocab[1:]) | set(model.cache.counts))
    for context in ["", "And the ", "And the L", "And the Lol", "And the Loll", "And he sa",
                    "And Moses "]:
        prefix = "" if context.endswith(" ") or not context else words(context)[-1]
        matching = [w for w in vocabulary if w.startswith(prefix) and len(w) > len(prefix)]
        context_only = context[:len(context) - len(prefix)]
        scored = sorted(model.predict(context_only, matching), key=lambda p: (-p[1], p[0]))
        expected = [(w[len(prefix):], p) for w, p in scored[:20]]
        got = model.predict(context, None)
        assert [s for s, _ in got] == [s for s, _ in expected]
        assert [p for _, p in got] == pytest.approx([p for _, p in expected], abs=1e-12)


@pytest.mark.parametrize("tables", ["word_tables", "char_tables"])
def test_the_best_from_a_history_s_continuations_equal_a_full_scan(tables, request, kjv_lines):
    """best_of (the continuations of a history, kept for its prefixes) and best (the best of
    each suffix's continuations) give the same ids and the same floats as scoring every
    unit of the range, ties by id."""
    tables = request.getfixturevalue(tables)
    tokens = words if tables.unit == "word" else list
    vocab = tables.vocab
    rng = random.Random(7)
    histories = {()}
    for line in kjv_lines[1500:1530] + ["Zerubbabel unknown-word the"]:
        ids = [ngram.BOS] + [tables.index.get(u, -1) for u in tokens(line)]
        for end in range(1, len(ids) + 1):
            history = ids[max(0, end - tables.order + 1):end]
            while -1 in history:    # cut after an unknown unit, as the model does
                history = history[history.index(-1) + 1:]
            histories.add(tuple(history))
    ranges = [(1, tables.base)] + [tables.prefix_range(vocab[i][:k]) for i in
                                   rng.sample(range(1, tables.base), 40) for k in (1, 2, 3)]
    used = 0
    for history in sorted(histories):
        rows = tables.history_rows(history)
        known = tables.continuations(rows, most=tables.base)
        assert (tables.continuations(rows, most=0) is None) == bool(len(known.ids))
        used += len(known.ids) > 0
        for lo, hi in rng.sample(ranges, 5):
            for n in (20, 5, 3 * tables.base):
                ids = np.arange(lo, hi)
                p = tables.probs(ids, rows)
                top = np.lexsort((ids, -p))[:n]
                for got_p, got_ids in (tables.best_of(known, lo, hi, n),
                                       tables.best(rows, lo, hi, n)):
                    assert got_ids.tolist() == ids[top].tolist()
                    assert got_p.tolist() == p[top].tolist()
    assert used > 50


def test_a_history_with_too_many_continuations_gives_the_same_predictions(word_model_file,
                                                                             monkeypatch):
    """Completions after a history with more than CONTINUATIONS_MOST continuations (read
    from the best of each suffix instead) equal those after its continuations."""
    contexts = [line[:i] for line in ["And God said unto Moses , Let my people go .",
                                      "In the beginning God created the heaven"]
                for i in range(len(line))]
    pooled = NgramModel(word_model_file)
    expected = [pooled.predict(c, None) for c in contexts]
    assert pooled._continuations_of.cache_info().hits > len(contexts) / 2
    monkeypatch.setattr(ngram, "CONTINUATIONS_MOST", 0)
    walked = NgramModel(word_model_file)
    assert [walked.predict(c, None) for c in contexts] == expected
    assert all(known is None or not len(known.ids)
               for known in map(walked._continuations, [(ngram.BOS,), (walked.tables.index["God"],)]))


# Character model ------------------------------------------------------------------------------

def test_character_model_scores_the_next_character_for_ce(char_tables):
    model = NgramModel(char_tables, top=5)
    (found,) = model.predict("In the beginnin", ["g"])
    assert found[0] == "g" and found[1] > math.log(0.5)
    assert model.predict("In the beginnin", ["\u20ac"]) == []  # not a training character
    top = model.predict("In the beginnin", None)
    assert top[0][0] == "g" and len(top) == 5
    # a multi-character candidate is the product of its characters
    (two,) = model.predict("In the beginni", ["ng"])
    (n,) = model.predict("In the beginni", ["n"])
    assert two[1] == pytest.approx(n[1] + found[1], abs=1e-12)


def test_character_cache(char_tables):
    model = NgramModel(char_tables)
    before = model.predict("abc", ["\u00e9", "e"])
    assert [c for c, _ in before] == ["e"]
    model.train("\u00e9t\u00e9 \u00e9t\u00e9")
    assert {c for c, _ in model.predict("abc", ["\u00e9", "e"])} == {"\u00e9", "e"}
    model.clear()
    assert model.predict("abc", ["\u00e9", "e"]) == before


# Files, training input, determinism ----------------------------------------------------------

def test_save_and_load_give_the_same_model(word_tables, word_model_file):
    loaded = load_tables(word_model_file)
    assert loaded.vocab == word_tables.vocab
    assert loaded.order == 3 and loaded.unit == "word"
    for a, b in zip(loaded.prob + loaded.gamma + loaded.rank + loaded.keys[1:],
                    word_tables.prob + word_tables.gamma + word_tables.rank
                    + word_tables.keys[1:]):
        assert np.array_equal(a, b)
    assert loaded.meta == json.loads(json.dumps(word_tables.meta))


def test_load_rejects_other_files(tmp_path):
    other = tmp_path / "other.lm"
    other.write_text("hello\n")
    with pytest.raises(InputError, match="not an lmc-ngram model file"):
        load_tables(other)
    with pytest.raises(InputError, match="cannot read model"):
        load_tables(tmp_path / "missing.lm")


def _serve_error(path: Path) -> tuple[int, str]:
    result = subprocess.run([PYTHON, "-m", "lmchallenge.cli.ngram", "serve", str(path)],
                            input="predict\tIn the \n", capture_output=True, text=True, timeout=60)
    return result.returncode, result.stderr


def test_a_damaged_model_file_is_refused_not_served(word_model_file, tmp_path):
    """A truncated model file, one changed by a bit anywhere or edited (QA: served with other
    answers, e.g. a flipped exponent answered logp +707, or a traceback) is refused with one
    line naming it."""
    good = word_model_file.read_bytes()
    header = int.from_bytes(good[len(ngram.FILE_MAGIC):len(ngram.FILE_MAGIC) + 8], "little")
    end = len(ngram.FILE_MAGIC) + 8 + header
    damaged = {
        "truncated": good[:len(good) // 2],
        "header cut": good[:end - 10],
        "order edited": good.replace(b'"order": 3', b'"order": 2', 1),
        "unit edited": good.replace(b'"unit": "word"', b'"unit": "wWrd"', 1),
        "a header key flipped": good.replace(b'"checksum"', b'"bhecksum"', 1),
        "a probability flipped": bytes(b ^ (0x40 if i == len(good) - 3 else 0)
                                       for i, b in enumerate(good)),
        "the header length flipped": good[:len(ngram.FILE_MAGIC) + 7] + b"\x01" + good[len(ngram.FILE_MAGIC) + 8:],
    }
    for what, data in damaged.items():
        assert data != good, what
        path = tmp_path / "damaged.lm"
        path.write_bytes(data)
        with pytest.raises(InputError, match="damaged lmc-ngram model file"):
            load_tables(path)
        code, stderr = _serve_error(path)
        assert code == 2 and stderr.startswith(f"lmc-ngram: error: {path}: damaged lmc-ngram "
                                               "model file ("), (what, stderr)
        assert stderr.count("\n") == 1 and "Traceback" not in stderr, what
    # every byte of the header, one bit at a time: refused, or (digits past a float's
    # precision) read as the same header
    rng = np.random.default_rng(0)
    for i in rng.choice(end, size=150, replace=False).tolist():
        path = tmp_path / "flipped.lm"
        path.write_bytes(good[:i] + bytes([good[i] ^ 1]) + good[i + 1:])
        try:
            tables = load_tables(path)
        except InputError as e:
            assert "model file" in str(e)
        else:
            assert json.loads(json.dumps(tables.meta)) == load_tables(word_model_file).meta


def test_train_checks_its_output_first_and_trains_on_a_tiny_corpus(tmp_path):
    """-o is not the corpus (QA: it replaced it), nor stdout; a corpus of fewer words than
    the order trains (QA: a sliding-window traceback)."""
    corpus = tmp_path / "one.txt"
    corpus.write_text("hello\n")
    for output, message in ((corpus, "cannot write: it is the input"),
                            ("-", "cannot write a model here")):
        result = subprocess.run([PYTHON, "-m", "lmchallenge.cli.ngram", "train", str(corpus),
                                 "-o", str(output)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    assert corpus.read_text() == "hello\n"
    for chars in ([], ["--chars", "--order", "9"]):
        out = tmp_path / "tiny.lm"
        ngram_main(["train", *chars, str(corpus), "-o", str(out)])
        model = NgramModel(str(out))
        assert model.predict("", ["hello"] if not chars else ["h"])[0][1] <= 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.txt", "tiny.lm"]   # no temporaries


def _without_checksum(good: bytes, **edits) -> bytes:
    """``good`` as a file written before the checksum (its header without it, padded with
    spaces to the same length), its arrays' descriptions edited."""
    start = len(ngram.FILE_MAGIC) + 8
    size = int.from_bytes(good[len(ngram.FILE_MAGIC):start], "little")
    header = json.loads(good[start:start + size])
    del header["checksum"]
    for name, change in edits.items():
        header["arrays"][name].update(change)
    text = json.dumps(header, sort_keys=True).encode()
    return good[:start] + text + b" " * (size - len(text)) + good[start + size:]


def test_a_file_without_checksum_loads_and_its_arrays_are_checked(word_model_file, tmp_path):
    """Files written before the checksum load as before; their arrays' types and lengths
    are checked against each other (review: a prob2 read as integers answered logp +42)."""
    good = word_model_file.read_bytes()
    old = tmp_path / "old.lm"
    old.write_bytes(_without_checksum(good))
    assert NgramModel(str(old)).predict("In the ", ["beginning"]) == \
        NgramModel(str(word_model_file)).predict("In the ", ["beginning"])
    vocabulary = len(load_tables(word_model_file).vocab)
    for edits, message in [({"prob2": {"dtype": "<i8"}}, "array prob2 is <i8 in 1 dimensions, not <f8 in 1"),
                           ({"rank1": {"shape": [100]}}, f"array rank1 has 100 entries, not {vocabulary - 1}"),
                           ({"vocab_lengths": {"shape": [100]}}, "array prob1 has"),
                           ({"keys2": {"shape": [5]}}, "array prob2 has")]:
        old.write_bytes(_without_checksum(good, **edits))
        with pytest.raises(InputError, match=f"damaged lmc-ngram model file \\({message}"):
            load_tables(old)


def test_a_model_whose_highest_order_is_empty_predicts(tmp_path):
    """A word list (no line as long as the order) trains a model whose top predictions
    work and are normalised (review: an IndexError for every predict after a line's end)."""
    corpus = tmp_path / "words.txt"
    corpus.write_text("hello\nworld\nhello\n")
    out = tmp_path / "words.lm"
    ngram_main(["train", str(corpus), "-o", str(out)])
    model = NgramModel(str(out))
    for context in ("hello ", "", "world "):
        top = model.predict(context, None)
        assert sorted(word for word, _ in top) == ["hello", "world"]
        assert math.fsum(math.exp(p) for _, p in top) == pytest.approx(1.0)


def test_serve_refuses_a_cache_weight_of_one(word_model_file):
    """At weight 1 the static model's share could be 0 in floating point (QA: a math domain
    error for every word outside the cache)."""
    result = subprocess.run([PYTHON, "-m", "lmchallenge.cli.ngram", "serve", "--cache-weight",
                             "1", str(word_model_file)], input="", capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "0<=x<1" in result.stderr


def test_training_twice_gives_identical_files_from_text_gzip_and_jsonl(corpus_file, kjv_lines,
                                                                          tmp_path):
    gz = tmp_path / "kjv.txt.gz"
    gz.write_bytes(gzip.compress(corpus_file.read_bytes()))
    jsonl = tmp_path / "kjv.jsonl"
    jsonl.write_text("".join(json.dumps({"userId": f"u{i % 7}", "timestamp": i, "text": line})
                             + "\n" for i, line in enumerate(kjv_lines)), encoding="utf-8")
    outputs = []
    for name, source in [("a", corpus_file), ("b", corpus_file), ("c", gz), ("d", jsonl)]:
        out = tmp_path / f"{name}.lm"
        ngram_main(["train", str(source), "-o", str(out)])
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2] == outputs[3]
    model = NgramModel(model=str(tmp_path / "a.lm"))
    assert model.predict("In the ", ["beginning"])[0][0] == "beginning"


def test_train_chars_option_and_default_order(corpus_file, tmp_path):
    out = tmp_path / "chars.lm"
    ngram_main(["train", "--chars", str(corpus_file), "-o", str(out)])
    tables = load_tables(out)
    assert tables.unit == "char" and tables.order == 6
    assert " " in tables.vocab and "e" in tables.vocab


def test_unique_rows_packed_and_column_codes_agree():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 5, size=(400, 3))
    packed = ngram._unique_rows(rows, 5)
    by_columns = ngram._unique_rows(rows, 2 ** 40)
    assert np.array_equal(packed[0], by_columns[0]) and np.array_equal(packed[1], by_columns[1])
    assert packed[1].sum() == 400
    assert [tuple(r) for r in packed[0]] == sorted({tuple(r) for r in rows.tolist()})


def test_large_vocabulary_high_order_uses_column_codes_and_stays_normalised(kjv_lines):
    lines = [words(line) for line in kjv_lines[:300]]
    tables = train_tables(lines, order=7)
    assert (tables.base + 1) ** 7 >= 2 ** 62  # the unpacked path
    model = NgramModel(tables)
    answer = model.predict("And God said unto ", tables.vocab[1:])
    assert math.fsum(math.exp(p) for _, p in answer) == pytest.approx(1.0, abs=1e-6)


def test_training_errors():
    for order in (0, 65):   # QA: 65 trained a file that lmc-ngram serve said was damaged
        with pytest.raises(LmcError, match=f"order must be from 1 to 64, not {order}"):
            train_tables([["a"]], order=order)
    with pytest.raises(LmcError, match="no word occurs at least 5 times"):
        train_tables([["a", "b"]], order=2, min_count=5)


def test_cli_errors_exit_2_with_a_message(tmp_path):
    bad = tmp_path / "bad.lm"
    bad.write_text("not a model")
    result = subprocess.run([PYTHON, "-m", "lmchallenge.cli.ngram", "serve", str(bad)],
                            input="", capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "not an lmc-ngram model file" in result.stderr
    result = subprocess.run([PYTHON, "-m", "lmchallenge.cli.ngram", "train",
                             str(tmp_path / "missing.txt"), "-o", str(tmp_path / "m.lm")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "missing.txt" in result.stderr
    assert not (tmp_path / "m.lm").exists()


# End to end through the reference client ------------------------------------------------------

@pytest.mark.reference
def test_reference_lmc_runs_the_shell_model(word_model_file, tmp_path):
    if not REFERENCE_LMC.exists():
        pytest.skip(f"reference lmchallenge==5.2 not installed at {REFERENCE_LMC}")
    lines = KJV_TEST.read_text(encoding="utf-8").splitlines()[:5]
    command = f"{PYTHON} -m lmchallenge.cli.ngram serve {word_model_file}"
    result = subprocess.run([str(REFERENCE_LMC), "run", command, "we"],
                            input="".join(line + "\n" for line in lines),
                            capture_output=True, text=True, timeout=120, check=True)
    log = [json.loads(row) for row in result.stdout.splitlines()]
    model = NgramModel(model=str(word_model_file))
    assert len(log) == sum(len(words(line)) for line in lines)
    for datum in log:
        text = lines[datum["message"]]
        answer = model.predict(text[:datum["character"]], [datum["target"]])
        expected = answer[0][1] if answer else None
        assert datum["logp"] == pytest.approx(expected, abs=1e-6) if expected is not None \
            else datum["logp"] is None


def test_train_creates_the_output_directory(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("in the beginning\nand the earth\n")
    output = tmp_path / "new" / "dir" / "m.lm"
    import subprocess, sys
    from pathlib import Path
    result = subprocess.run([str(Path(sys.executable).parent / "lmc-ngram"), "train", str(corpus),
                             "-o", str(output)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert output.stat().st_size > 0


@pytest.mark.parametrize("options, why", [
    ({"cache_weight": 1.5}, "cache_weight must be a number from 0 to below 1, not 1.5"),
    ({"cache_weight": -1}, "cache_weight must be a number from 0 to below 1, not -1"),
    ({"cache_halfway": -30}, "cache_halfway must be a number above 0, not -30"),
    ({"cache_halfway": "50"}, "cache_halfway must be a number above 0, not '50'"),
    ({"top": 2.7}, "top must be a whole number >= 0, not 2.7"),
    ({"top": True}, "top must be a whole number >= 0, not True")])
def test_options_out_of_range_are_refused_in_process_as_lmc_ngram_serve_refuses_them(
        word_model_file, options, why):
    # QA: cache_weight 1.5 gave "better" entropies, -1 probabilities summing to 1.6, exit 0
    with pytest.raises(ValueError, match=f"^{why}$".replace("(", r"\(").replace(")", r"\)")):
        NgramModel(str(word_model_file), **options)
    run = subprocess.run([*lmc_command(), "run", "lmchallenge.model.ngram:NgramModel", "-o",
                          json.dumps({"model": str(word_model_file), **options}), "we"],
                         input=b"in the beginning\n", capture_output=True, timeout=120)
    assert run.returncode == 2 and run.stdout == b""
    assert run.stderr.decode() == ("lmc: error: model 'lmchallenge.model.ngram:NgramModel': raised "
                                   f"ValueError while starting: {why}\n")


def test_a_word_model_refuses_ce_and_a_character_model_the_word_games(word_tables, char_tables,
                                                                       tmp_path):
    # QA: both played, exit 0, with figures that meant nothing (a character model's word
    # probabilities summed to 1.18)
    word, chars = tmp_path / "word.lm", tmp_path / "chars.lm"
    save_tables(word_tables, word)
    save_tables(char_tables, chars)
    refusals = {"ce": (word, "a word model scores words, not characters: train a character "
                             "model (lmc-ngram train --chars) for ce")}
    for game in ("wc", "we"):
        refusals[game] = (chars, "a character model scores characters, not words: train a word "
                                 "model (lmc-ngram train without --chars) for the word games")
    for game, (path, why) in refusals.items():
        served = subprocess.run([*lmc_command(), "run", f"{PYTHON} -m lmchallenge.cli.ngram serve {path}",
                                 game], input=b"in the beginning\n", capture_output=True, timeout=120)
        assert served.returncode == 2 and served.stdout == b""
        assert f"lmc-ngram: error: {path}: does not play {game}: {why}\n" in served.stderr.decode()
        inside = subprocess.run([*lmc_command(), "run", "lmchallenge.model.ngram:NgramModel", "-o",
                                 json.dumps({"model": str(path)}), game], input=b"in the beginning\n",
                                capture_output=True, timeout=120)
        assert inside.returncode == 2 and inside.stderr.decode() == (
            f"lmc: error: model 'lmchallenge.model.ngram:NgramModel': does not play {game}: {why}\n")
    for game, path in (("ce", chars), ("we", word), ("wc", word)):     # what each plays
        assert subprocess.run([*lmc_command(), "run", f"{PYTHON} -m lmchallenge.cli.ngram serve {path}",
                               game], input=b"in the beginning\n", capture_output=True,
                              timeout=120).returncode == 0
