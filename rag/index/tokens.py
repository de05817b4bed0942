"""A text's word pieces read in context by the English encoder: what the judge compares a missing
phrase of a question with, word by word, against the answering papers (rag/judge/constraints.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class ReadsTokens(Protocol):
    """An English encoder that gives a text's word pieces in context: both of rag/index/embedding.py's (the
    ONNX export and the sentence-transformers fallback) do."""

    def tokens(self, texts: list[str], layer: int | None = None) -> list[TokenVectors]:
        """Each text's pieces, with `layer`'s vectors too when asked and the encoder gives them."""
        ...


@dataclass(frozen=True)
class TokenVectors:
    """A text's word pieces in context: the unit vectors of the model's last layer (what its mean
    pooling averages), each piece's span of characters in the text, and the pieces themselves,
    without the model's [CLS] and [SEP]; `layers`: the unit vectors of an earlier layer, by number,
    where one was asked for (the framing tagger reads one)."""

    vectors: np.ndarray
    spans: list[tuple[int, int]]
    pieces: list[str]
    layers: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(
        cls, hidden: np.ndarray, spans, pieces: list[str], layers: dict[int, np.ndarray] | None = None
    ) -> TokenVectors:
        keep = [i for i, (start, end) in enumerate(spans) if end > start]  # the special tokens span nothing

        def unit(rows: np.ndarray) -> np.ndarray:
            rows = np.asarray(rows[keep], dtype=np.float32)
            return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

        return cls(
            unit(hidden),
            [tuple(spans[i]) for i in keep],
            [pieces[i] for i in keep],
            {n: unit(rows) for n, rows in (layers or {}).items()},
        )

    def at(self, layer: int | None) -> np.ndarray:
        """The pieces' vectors at `layer` (None: the last); KeyError when it was not read."""
        return self.vectors if layer is None else self.layers[layer]


LAST = "last_hidden_state"  # the exported encoder's outputs: this, and "layer_<n>" for each earlier layer


def layer_output(layer: int) -> str:
    return f"layer_{layer}"


def read_with_onnx(session, tokenizer, text: str, layer: int | None = None) -> TokenVectors:
    """`text` through an ONNX Runtime session of the exported encoder and its `tokenizers` tokenizer,
    in one run; `layer` too where the export has that output (an export from before it has none)."""
    encoding = tokenizer.encode(text)
    ids = np.asarray([encoding.ids], dtype=np.int64)
    mask = np.asarray([encoding.attention_mask], dtype=np.int64)
    asked = [LAST]
    if layer is not None and layer_output(layer) in {output.name for output in session.get_outputs()}:
        asked.append(layer_output(layer))
    hidden, *earlier = session.run(asked, {"input_ids": ids, "attention_mask": mask})
    layers = {layer: earlier[0][0]} if earlier and layer is not None else None
    return TokenVectors.of(hidden[0], encoding.offsets, encoding.tokens, layers)


def read_with_sentence_transformer(model, text: str, layer: int | None = None) -> TokenVectors:
    """`text` through a sentence-transformers model (the fallback when there is no ONNX export):
    its transformer's hidden states, the last one what mean pooling averages."""
    import torch

    encoding = model.tokenizer(text, return_offsets_mapping=True, truncation=True, max_length=model.max_seq_length)
    inputs = {key: torch.tensor([encoding[key]]) for key in ("input_ids", "attention_mask")}
    with torch.no_grad():
        states = model[0].model(**inputs, output_hidden_states=True).hidden_states
    pieces = model.tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    layers = {layer: states[layer][0].numpy()} if layer is not None else None
    return TokenVectors.of(states[-1][0].numpy(), encoding["offset_mapping"], pieces, layers)
