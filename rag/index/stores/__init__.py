"""Where the index is kept (`RAG_VECTOR_STORE`), opened by name: the calls every caller makes.

faiss (the default): build folders under `RAG_INDEX_DIR`, one machine. milvus: a Milvus
collection that replicas on several machines share. Each store implements the contract in
base.py; sync.py keeps either in line with its record. A new store is a package implementing
`Store` and `SearchIndex`, and an entry in `STORES` (mypy checks that it keeps the contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rag.common.errors import RagError
from rag.common.settings import Settings
from rag.index.stores import sync
from rag.index.stores.base import AddResult, IndexReport, SearchIndex, Store

if TYPE_CHECKING:
    from rag.index.ray_embedding import RayEmbedding


def _faiss() -> Store[Any]:
    from rag.index.stores.faiss import FaissStore

    return FaissStore()


def _milvus() -> Store[Any]:
    from rag.index.stores.milvus import MilvusStore

    return MilvusStore()


# name -> (the store, what to install when its client library is missing)
STORES: dict[str, tuple[Callable[[], Store[Any]], str]] = {
    "faiss": (_faiss, "pip install faiss-cpu"),
    "milvus": (_milvus, "pip install 'icml-rag[scale]'"),
}


def store_for(settings: Settings) -> Store[Any]:
    """The configured store (its client library is imported only when it is the one chosen)."""
    make, install = STORES[settings.store.vector_store]
    try:
        return make()
    except ImportError as exc:
        raise RagError(
            f"RAG_VECTOR_STORE={settings.store.vector_store} needs a library that is missing: {install} ({exc})"
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
