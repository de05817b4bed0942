"""Where the index is kept (`RAG_VECTOR_STORE`), opened by name: the calls every caller makes.

faiss (the default): build folders under `RAG_INDEX_DIR`, one machine. milvus: a Milvus
collection that replicas on several machines share. Each store implements the contract in
base.py; sync.py keeps either in line with its record. A new store is a package implementing
`Store` and `SearchIndex`, and a line in `STORES`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from ..config import Settings
from ..errors import RagError
from . import sync
from .base import AddResult, IndexReport, SearchIndex, Store

if TYPE_CHECKING:
    from ..ray_embedding import RayEmbedding

# name -> (module, class, what to install when its client library is missing)
STORES = {
    "faiss": ("rag.stores.faiss", "FaissStore", "pip install faiss-cpu"),
    "milvus": ("rag.stores.milvus", "MilvusStore", "pip install 'icml-rag[scale]'"),
}


def store_for(settings: Settings) -> Store:
    """The configured store (its client library is imported only when it is the one chosen)."""
    module, name, install = STORES[settings.vector_store]
    try:
        return getattr(import_module(module), name)()
    except ImportError as exc:
        raise RagError(
            f"RAG_VECTOR_STORE={settings.vector_store} needs a library that is missing: {install} ({exc})"
        ) from None


def open_index(settings: Settings) -> SearchIndex:
    """The index to answer from (after finishing or undoing what a killed writer left)."""
    return store_for(settings).open(settings)


def load_index(settings: Settings) -> SearchIndex:
    return store_for(settings).load(settings)


def index_seeds(
    settings: Settings, show_progress: bool = False, only_if_stale: bool = False, remote: RayEmbedding | None = None
) -> IndexReport:
    return sync.index_seeds(store_for(settings), settings, show_progress, only_if_stale, remote)


def add_seed_texts(settings: Settings, items: list[tuple[str, bytes]]) -> AddResult:
    return sync.add_seed_texts(store_for(settings), settings, items)


def seeds_changed(settings: Settings, index: SearchIndex) -> bool:
    """The seed folder moved on since this index was built (the service then catches up)."""
    return store_for(settings).seeds_changed(settings, index)
