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
