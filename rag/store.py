"""Which store holds the index (`RAG_VECTOR_STORE`): the calls every caller makes, for either.

faiss (the default): files under `RAG_INDEX_DIR`, one machine (rag/index.py). milvus: a Milvus
collection that replicas on several machines share (rag/milvus_index.py). Both give a
`SearchIndex` to answer from and take the same adds.
"""

from __future__ import annotations

from . import index as faiss_index
from .config import Settings
from .index import AddResult, IndexReport, SearchIndex


def _milvus():
    try:
        from . import milvus_index
    except ImportError as exc:
        from .errors import RagError

        raise RagError(f"RAG_VECTOR_STORE=milvus needs pymilvus: pip install 'icml-rag[scale]' ({exc})") from None
    return milvus_index


def open_index(settings: Settings) -> SearchIndex:
    """The index to answer from (for FAISS, after finishing or undoing what a killed writer left)."""
    return _milvus().load(settings) if settings.vector_store == "milvus" else faiss_index.open_index(settings)


def load_index(settings: Settings) -> SearchIndex:
    return _milvus().load(settings) if settings.vector_store == "milvus" else faiss_index.load_index(settings)


def _writer(settings: Settings):
    """The module that builds and adds for the configured store (both have the same two calls)."""
    return _milvus() if settings.vector_store == "milvus" else faiss_index


def index_seeds(
    settings: Settings, show_progress: bool = False, only_if_stale: bool = False, remote=None
) -> IndexReport:
    """`remote`: a `ray_embedding.RayEmbedding` to embed on Ray rather than in this process."""
    return _writer(settings).index_seeds(settings, show_progress, only_if_stale, remote)


def add_seed_texts(settings: Settings, items: list[tuple[str, bytes]]) -> AddResult:
    return _writer(settings).add_seed_texts(settings, items)


def seeds_changed(settings: Settings, index: SearchIndex) -> bool:
    """The seed folder moved on since this index was built (FAISS: the folder is the record; a
    Milvus collection is its own record and replicas need no seed folder)."""
    return index.store == "faiss" and faiss_index.seeds_changed(settings, index.manifest)
