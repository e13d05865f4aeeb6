"""Tiny causal LMs for the neural tests: a tokenizer trained here on shipped text, a Llama
architecture with random weights (no download)."""

from __future__ import annotations

import json
from pathlib import Path

MARKERS = ("byte-level", "metaspace")


def train_tokenizer(corpus: Path, marker: str, vocab_size: int = 400):
    """A BPE tokenizer trained on ``corpus`` whose tokens mark the beginning of a word:
    GPT-2's byte-level ``Ġ`` or SentencePiece's ``▁``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    specials = ["<s>", "</s>", "<pad>"]
    if marker == "byte-level":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(
            replacement="\u2581", prepend_scheme="never")])
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=vocab_size + len(alphabet), special_tokens=specials,
                                  initial_alphabet=alphabet)
    lines = corpus.read_text(encoding="utf-8").splitlines()
    tok.train_from_iterator(lines, trainer=trainer)
    if marker != "byte-level":  # SentencePiece-style byte fallback: <0xNN> for unknown bytes
        spec = json.loads(tok.to_str())
        vocab = spec["model"]["vocab"]
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
        spec["model"]["byte_fallback"] = True
        tok = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


def tiny_model(vocab_size: int, seed: int = 0, layers: int = 2, hidden: int = 32):
    """A Llama-architecture causal LM with random weights (float32, CPU, eval mode)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger logits than the default init: a peaky, less uniform model
        model.lm_head.weight.mul_(40.0)
    return model.eval()


def save_tiny(directory: Path, corpus: Path, marker: str) -> Path:
    """A model directory (``save_pretrained``) with a tiny model and its tokenizer."""
    tokenizer = train_tokenizer(corpus, marker)
    model = tiny_model(len(tokenizer))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _other_config(architecture: str, vocab_size: int):
    import transformers as T
    attention = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                     num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512)
    if architecture == "gpt2":      # learned absolute positions, fused key/value projection
        return T.GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4,
                            n_positions=512)
    if architecture == "gpt_neox":  # partial rotary (Pythia)
        return T.GPTNeoXConfig(**attention)
    if architecture == "mistral":   # sliding-window attention in every layer
        return T.MistralConfig(**attention, num_key_value_heads=2, sliding_window=16)
    if architecture == "gemma3":    # sliding-window layers beside a global one
        return T.Gemma3TextConfig(**{**attention, "num_hidden_layers": 3}, num_key_value_heads=2,
                                  head_dim=8, sliding_window=16,
                                  layer_types=["sliding_attention", "full_attention",
                                               "sliding_attention"])
    if architecture == "deepseek_v2":  # multi-head latent attention: keys and values differ
        return T.DeepseekV2Config(**attention, moe_intermediate_size=16, num_key_value_heads=4,
                                  kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4,
                                  qk_nope_head_dim=8, v_head_dim=6, n_routed_experts=2,
                                  num_experts_per_tok=1, first_k_dense_replace=2)
    if architecture == "lfm2":      # a hybrid: convolution layers beside attention
        return T.Lfm2Config(**attention, num_key_value_heads=2,
                            layer_types=["conv", "full_attention"])
    raise ValueError(architecture)


OTHER_ARCHITECTURES = ("gpt2", "gpt_neox", "mistral", "gemma3", "deepseek_v2")


def tiny_other(architecture: str, vocab_size: int, seed: int = 0):
    """A tiny causal LM of another architecture than Llama's (:data:`OTHER_ARCHITECTURES`, or
    ``lfm2``, a hybrid the adapter refuses),
    random weights, float32, CPU, eval mode: windows of 16 tokens where it has them."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_other_config(architecture, vocab_size))
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(40.0)
    return model.eval()


def with_dummy_prefix(tokenizer, how: str):
    """``tokenizer`` (from :func:`train_tokenizer`) made to put a space before every text it
    encodes, as SentencePiece's dummy prefix does (Llama 2, Mistral): ``how`` is
    ``"metaspace-first"`` (the pre-tokenizer's ``prepend_scheme: first``), ``"normalizer"``
    (a ``Prepend`` normalizer, the older conversion; both for a ``metaspace`` tokenizer),
    ``"regex"`` (a ``Replace`` of ``^``, for a ``metaspace`` one) or ``"byte-level"``
    (``add_prefix_space``, for a ``byte-level`` one).  The same vocabulary
    and merges, so a text's tokens are those of ``" " + text`` by the original."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    if how == "byte-level":
        spec["pre_tokenizer"]["add_prefix_space"] = True
    elif how == "regex":   # a way prefix.py does not know how to undo
        spec["normalizer"] = {"type": "Replace", "pattern": {"Regex": "^"}, "content": "\u2581"}
    elif how == "metaspace-first":
        spec["pre_tokenizer"]["prepend_scheme"] = "first"
    else:
        spec["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        spec["pre_tokenizer"] = None
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                   bos_token="<s>", eos_token="</s>", pad_token="<pad>")
