"""The Milvus store's collections: how they are named, made, connected to and read in bulk.

For `RAG_MILVUS_COLLECTION=icml_rag`:

    icml_rag_meta                 one row "current": the generation in use, a version that
                                  changes with every add, model and chunking parameters
    icml_rag_<gen>_chunks         chunk text, stemmed words (BM25 function), English and
                                  multilingual vectors
    icml_rag_<gen>_sentences      every sentence with its vectors
    icml_rag_<gen>_papers         the papers (the commit record of an add), each with its place
                                  on the map and its topic
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rag.common.errors import IndexNotFoundError, StoreUnavailableError
from rag.common.settings import Settings
from rag.index.corpus import Paper
from rag.index.topics import Place

BATCH = 1000  # rows per insert request
TEXT = 65535  # the longest VARCHAR Milvus stores (bytes)
NO_VECTOR = [0.0, 0.0]  # Milvus wants a vector field in every collection; papers and meta have none
GENERATION = re.compile(r"[0-9a-f]{8}")
TABLES = ("chunks", "sentences", "papers")
NOT_LOADED = 101  # Milvus' error code for a collection that is not loaded
UNREACHABLE = 2  # pymilvus': the server cannot be reached


@lru_cache(maxsize=1)
def _bm25_words():
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    return lambda texts: [
        " ".join(words)
        for words in bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    ]


def bm25_words(texts: Iterable[str]) -> list[str]:
    """The words BM25 sees, as the FAISS path's bm25s does: stop words out, Snowball stems.
    Written to a field of their own because Milvus Lite's analyzer only lowercases and splits
    (Milvus' own stemmer filter is not in Lite): both stores then rank with the same words."""
    return _bm25_words()(texts)


# Milvus Lite's server keeps gRPC's default ping policy (no pings on an idle connection, at
# most one per 5 minutes) and closes a client that pings every 10 s while idle (pymilvus'
# default) with GOAWAY "too_many_pings"; the next request then fails.
GRPC_OPTIONS = {"grpc.keepalive_time_ms": 300_000, "grpc.keepalive_permit_without_calls": 0}


@contextmanager
def milvus_errors(settings: Settings) -> Iterator[None]:
    """A Milvus failure (server down, timeout, refused request) becomes one clear error."""
    from pymilvus.exceptions import MilvusException

    try:
        yield
    except MilvusException as exc:
        raise StoreUnavailableError(
            f"Milvus at {settings.milvus_address} failed: {getattr(exc, 'message', exc)}; nothing was changed "
            f"that a retry would not finish"
        ) from exc


def connect(settings: Settings):
    from pymilvus import MilvusClient

    address = settings.milvus_address
    if "://" not in address:  # Milvus Lite in a local file: its folder must exist
        Path(address).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # Our errors say what failed; pymilvus' own log of each (a traceback on stderr) is noise.
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    with milvus_errors(settings):
        return MilvusClient(
            uri=address,
            token=settings.store.milvus_token or "",
            timeout=settings.store.milvus_timeout,
            grpc_options=GRPC_OPTIONS,
        )


@dataclass
class Names:
    base: str
    generation: str

    @property
    def meta(self) -> str:
        return f"{self.base}_meta"

    def of(self, table: str) -> str:
        return f"{self.base}_{self.generation}_{table}"


def loaded(client, *names: str) -> None:
    """Collections come back released after a server restart: load them (a no-op when loaded)."""
    for name in names:
        client.load_collection(name)


def read_meta(client, base: str) -> dict | None:
    if not client.has_collection(f"{base}_meta"):
        return None
    rows = client.query(f"{base}_meta", ids=["current"], output_fields=["value"])
    return json.loads(rows[0]["value"]) if rows else None


def current_meta(client, settings: Settings) -> dict:
    """The meta row of the index, which must exist (IndexNotFoundError otherwise)."""
    manifest = read_meta(client, settings.store.milvus_collection)
    if manifest is None:
        raise IndexNotFoundError(
            f"no index in Milvus at {settings.milvus_address} (collection "
            f"{settings.store.milvus_collection}): run `rag index` with RAG_VECTOR_STORE=milvus"
        )
    return manifest


def write_meta(client, base: str, manifest: dict) -> None:
    client.upsert(f"{base}_meta", [{"key": "current", "value": json.dumps(manifest), "v": NO_VECTOR}])


def _schema(fields: list[tuple], bm25: str | None):
    """A schema of `fields` ((name, type, kwargs)) and, with `bm25`, a BM25 function over that text field."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False)
    for name, kind, kwargs in fields:
        schema.add_field(name, getattr(DataType, kind), **kwargs)
    if bm25 is not None:
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name=f"{bm25}_bm25",
                function_type=FunctionType.BM25,
                input_field_names=[bm25],
                output_field_names=["sparse"],
            )
        )
    return schema


def _index_params(client, fields: list[tuple], vectors: dict[str, str], bm25: str | None):
    """An IP index on each of `vectors` (field -> "FLAT"/"HNSW"), BM25's sparse index, and an
    inverted index on `paper_id` where it is not the key (reads and deletes select by paper)."""
    params = client.prepare_index_params()
    if any(f[0] == "paper_id" and not f[2].get("is_primary") for f in fields):
        params.add_index("paper_id", index_type="INVERTED")
    for vector, kind in vectors.items():
        params.add_index(
            vector,
            index_type=kind,
            metric_type="IP",
            **({"params": {"M": 32, "efConstruction": 64}} if kind == "HNSW" else {}),
        )
    if bm25 is not None:
        # k1 = 1.5 as bm25s (the FAISS path); Milvus' default is 1.2.
        params.add_index(
            "sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params={"bm25_k1": 1.5, "bm25_b": 0.75}
        )
    return params


def create(client, name: str, fields: list[tuple], vectors: dict[str, str], bm25: str | None = None) -> None:
    """A collection, indexed and loaded."""
    # Strong: a search sees every insert acknowledged before it, so an add is visible to every
    # replica as soon as it is committed.
    schema, params = _schema(fields, bm25), _index_params(client, fields, vectors, bm25)
    client.create_collection(name, schema=schema, index_params=params, consistency_level="Strong")


def _generation_tables(
    dimensions: int, multilingual: int | None
) -> dict[str, tuple[list[tuple], dict[str, str | None], str | None]]:
    """table -> (fields, vector field -> its index kind, BM25 text field) of a generation's
    collections; a kind of None is the generation's, chosen by its vector count."""
    key = ("id", "VARCHAR", {"is_primary": True, "max_length": 64})
    pid = ("paper_id", "VARCHAR", {"max_length": 16})
    vectors = [("dense", "FLOAT_VECTOR", {"dim": dimensions})]
    if multilingual:
        vectors.append(("multilingual", "FLOAT_VECTOR", {"dim": multilingual}))
    searched: dict[str, str | None] = {v[0]: None for v in vectors}
    text = ("text", "VARCHAR", {"max_length": TEXT})
    return {
        "chunks": (
            [key, pid, text, ("words", "VARCHAR", {"max_length": TEXT, "enable_analyzer": True}), *vectors],
            searched,
            "words",
        ),
        "sentences": ([key, pid, ("position", "INT64", {}), text, *vectors], searched, None),
        "papers": (
            [
                ("paper_id", "VARCHAR", {"is_primary": True, "max_length": 16}),
                ("seq", "INT64", {}),
                ("record", "VARCHAR", {"max_length": TEXT}),
                ("x", "FLOAT", {}),  # its place on the map and its topic (rag/index/topics.py)
                ("y", "FLOAT", {}),
                ("topic", "INT64", {}),
                ("v", "FLOAT_VECTOR", {"dim": 2}),
            ],
            {"v": "FLAT"},  # a placeholder: Milvus wants a vector field
            None,
        ),
    }


def create_generation(client, names: Names, dimensions: int, multilingual: int | None) -> None:
    """A generation's collections, without indexes: a build inserts its papers batch by batch
    and indexes once it knows how many vectors there are (`index_generation`)."""
    for table, (fields, _, bm25) in _generation_tables(dimensions, multilingual).items():
        client.create_collection(names.of(table), schema=_schema(fields, bm25), consistency_level="Strong")


def index_generation(client, names: Names, dimensions: int, multilingual: int | None, kind: str) -> None:
    """Index a written generation (`kind`, "FLAT"/"HNSW", for its vectors) and load it."""
    for table, (fields, vectors, bm25) in _generation_tables(dimensions, multilingual).items():
        indexed = {field: fixed or kind for field, fixed in vectors.items()}
        client.flush(names.of(table))
        client.create_index(names.of(table), _index_params(client, fields, indexed, bm25))
        client.load_collection(names.of(table))


def ensure_meta(client, base: str) -> None:
    if not client.has_collection(f"{base}_meta"):
        create(
            client,
            f"{base}_meta",
            [
                ("key", "VARCHAR", {"is_primary": True, "max_length": 64}),
                ("value", "VARCHAR", {"max_length": TEXT}),
                ("v", "FLOAT_VECTOR", {"dim": 2}),
            ],
            {"v": "FLAT"},
        )


def insert(client, name: str, rows: list[dict]) -> None:
    for start in range(0, len(rows), BATCH):
        client.insert(name, rows[start : start + BATCH])


def id_filter(paper_ids: Iterable[str]) -> str:
    return f"paper_id in {json.dumps(sorted(paper_ids))}"


def load_papers(client, names: Names) -> tuple[list[Paper], dict[str, Place]]:
    """The papers in their order, and each one's place on the map."""
    rows = []
    iterator = client.query_iterator(
        names.of("papers"), batch_size=1000, output_fields=["seq", "record", "x", "y", "topic"]
    )
    while batch := iterator.next():
        rows.extend(batch)
    iterator.close()
    rows.sort(key=lambda r: r["seq"])
    return [Paper(**json.loads(r["record"])) for r in rows], places_of(rows)


def places_of(rows: list[dict]) -> dict[str, Place]:
    """Rows of the papers collection (paper_id, x, y, topic) -> places by paper id."""
    return {r["paper_id"]: Place(round(float(r["x"]), 5), round(float(r["y"]), 5), int(r["topic"])) for r in rows}
