"""A tiny cross-encoder built at test time: a 1-layer BERT with a classification head,
exported to ONNX, and its ``tokenizer.json`` built with ``tokenizers`` (nothing is
downloaded). What an operator points ``MEMSERVE_RERANK_ONNX_DIR`` at, in miniature: the
same input names, pair encoding (token types) and logits output as real ones.

Its weights are random (seeded): tests compare its ONNX scores with the torch model's
and check the order the service gives against the scores, not against meaning.
"""

from __future__ import annotations

import re
from pathlib import Path

WORDS = (
    "i drive a tesla model 3 have two cats learning python my pets keep fighting how do"
    " charge car on long road trip suggest small project to practice coding book me wash"
    " the user likes coffee tea dog walks running shoes garden tomatoes"
)
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]


def vocab() -> dict[str, int]:
    words = sorted(set(re.findall(r"\w+", WORDS.lower())))
    return {w: i for i, w in enumerate([*SPECIAL, *words])}


def build_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    v = vocab()
    tok = Tokenizer(WordPiece(v, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", v["[CLS]"]), ("[SEP]", v["[SEP]"])],
    )
    tok.save(str(path))


def tiny_bert(num_labels: int = 1, seed: int = 7):  # -> BertForSequenceClassification
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab()),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        num_labels=num_labels,
        return_dict=False,
        initializer_range=0.5,  # the default 0.02 scores every pair alike
    )
    return BertForSequenceClassification(config).eval()


def build_cross_encoder(directory: Path, num_labels: int = 1, seed: int = 7) -> Path:
    """``directory`` with ``model.onnx`` and ``tokenizer.json``; returns it."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer(directory / "tokenizer.json")
    model = tiny_bert(num_labels, seed)
    ids = torch.tensor([[2, 5, 3, 6, 3]], dtype=torch.int64)
    args = (ids, torch.ones_like(ids), torch.tensor([[0, 0, 0, 1, 1]], dtype=torch.int64))
    axes = {0: "batch", 1: "sequence"}
    torch.onnx.export(
        model,
        args,
        str(directory / "model.onnx"),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={
            "input_ids": axes,
            "attention_mask": axes,
            "token_type_ids": axes,
            "logits": {0: "batch"},
        },
        opset_version=17,
        dynamo=False,
    )
    return directory


def torch_scores(directory: Path, query: str, texts: list[str], num_labels: int = 1, seed: int = 7):
    """The same pairs scored by the torch model (what the ONNX run must reproduce)."""
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    model = tiny_bert(num_labels, seed)
    out = []
    with torch.no_grad():
        for t in texts:
            e = tok.encode(query, t)
            logits = model(
                torch.tensor([e.ids]),
                torch.tensor([e.attention_mask]),
                torch.tensor([e.type_ids]),
            )[0][0]
            out.append(float(logits[0] if num_labels == 1 else logits[-1] - logits[0]))
    return out
