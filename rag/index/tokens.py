"""A text's word pieces read in context by the English encoder: what the judge compares a missing
phrase of a question with, word by word, against the answering papers (rag/judge/constraints.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class ReadsTokens(Protocol):
    """An English encoder that gives a text's word pieces in context: both of rag/index/embedding.py's (the
    ONNX export and the sentence-transformers fallback) do."""

    def tokens(self, texts: list[str]) -> list[TokenVectors]: ...


@dataclass(frozen=True)
class TokenVectors:
    """A text's word pieces in context: the unit vectors of the model's last layer (what its mean
    pooling averages), each piece's span of characters in the text, and the pieces themselves,
    without the model's [CLS] and [SEP]."""

    vectors: np.ndarray
    spans: list[tuple[int, int]]
    pieces: list[str]

    @classmethod
    def of(cls, hidden: np.ndarray, spans, pieces: list[str]) -> TokenVectors:
        keep = [i for i, (start, end) in enumerate(spans) if end > start]  # the special tokens span nothing
        rows = np.asarray(hidden[keep], dtype=np.float32)
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        return cls(rows, [tuple(spans[i]) for i in keep], [pieces[i] for i in keep])


def read_with_onnx(session, tokenizer, text: str) -> TokenVectors:
    """`text` through an ONNX Runtime session of the exported encoder and its `tokenizers` tokenizer."""
    encoding = tokenizer.encode(text)
    ids = np.asarray([encoding.ids], dtype=np.int64)
    mask = np.asarray([encoding.attention_mask], dtype=np.int64)
    (hidden,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    return TokenVectors.of(hidden[0], encoding.offsets, encoding.tokens)


def read_with_sentence_transformer(model, text: str) -> TokenVectors:
    """`text` through a sentence-transformers model (the fallback when there is no ONNX export)."""
    rows = model.encode(text, output_value="token_embeddings", convert_to_numpy=True)
    encoding = model.tokenizer(text, return_offsets_mapping=True, truncation=True)
    pieces = model.tokenizer.convert_ids_to_tokens(encoding["input_ids"][: len(rows)])
    return TokenVectors.of(np.asarray(rows), encoding["offset_mapping"][: len(rows)], pieces)
