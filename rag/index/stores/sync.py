"""The index kept in line with its record, written once over the `Store` contract: a build or
catch-up from the seed folder (`rag index`, the service at start) and an add of abstracts
(`rag add`, POST /papers). Each store decides how its writes are made atomic; this module
decides what is written."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rag.common.errors import IndexCorruptError, IndexNotFoundError, IndexStaleError
from rag.common.settings import Settings, check_llm_titles
from rag.index.corpus import Corpus, build_corpus, load_corpus
from rag.index.formats import parse_file
from rag.index.stores.base import (
    AddResult,
    IndexReport,
    Published,
    SearchIndex,
    SeedChanges,
    Store,
    added_files,
    is_added,
)

if TYPE_CHECKING:
    from rag.index.ray_embedding import RayEmbedding

UNUSABLE = (IndexNotFoundError, IndexStaleError, IndexCorruptError)


def index_seeds(
    store: Store[Any],
    settings: Settings,
    show_progress: bool = False,
    only_if_stale: bool = False,
    remote: RayEmbedding | None = None,
) -> IndexReport:
    """Bring the index in line with the seed folder, read while holding the store's writer.

    Without `only_if_stale` (`rag index`) everything is embedded again. With it (`rag index
    --if-needed`, the service at start) nothing happens when the index matches the folder, and
    otherwise only the difference is embedded or deleted; everything only when there is no
    usable index or the model or chunking changed. `remote` embeds on a Ray cluster."""
    check_llm_titles(settings)
    started = time.perf_counter()
    with store.writing(settings):
        indexing = settings.indexing
        seeds = load_corpus(
            indexing.seeds_dir, max_bytes=indexing.max_file_bytes, min_words=indexing.min_abstract_words
        )
        previous: SearchIndex | None = None
        reason = "a full rebuild was asked for"
        if only_if_stale:
            if store.up_to_date(settings, seeds):  # no model is loaded
                return IndexReport(None, None, False, len(seeds), 0, 0, time.perf_counter() - started)
            try:
                previous = store.load(settings)
            except UNUSABLE as exc:
                reason = str(exc)
        published: Published | None
        if previous is None:
            corpus = _with_kept_adds(store, settings, seeds)
            published = store.build(corpus, settings, show_progress, remote)
            return IndexReport(
                published.where,
                reason,
                False,
                published.papers,
                0,
                0,
                time.perf_counter() - started,
                published.chunks,
                published.titles,
            )
        from_seeds = [p for p in previous.corpus.papers if not (store.records_adds and is_added(p))]
        changes = SeedChanges.between(Corpus(from_seeds, 0), seeds)
        wanted = set(changes.added)
        added = [p for p in seeds.papers if p.paper_id in wanted and previous.corpus.get(p.paper_id) is None]
        published = store.catch_up(previous, seeds, added, changes.removed, settings, show_progress, remote)
    if published is None:
        return IndexReport(None, None, False, len(previous.corpus), 0, 0, time.perf_counter() - started)
    return IndexReport(
        published.where,
        str(changes),
        True,
        published.papers,
        len(added),
        len(changes.removed),
        time.perf_counter() - started,
        published.chunks,
        published.titles,
    )


def _with_kept_adds(store: Store[Any], settings: Settings, seeds: Corpus) -> Corpus:
    """The seeds, plus the papers added through a store that is their only record (whatever
    model its index was built with: they are kept as text and embedded again)."""
    if not store.records_adds:
        return seeds
    try:
        existing = store.load(settings, check=False)
    except IndexNotFoundError:
        return seeds
    kept = [p for p in existing.corpus.papers if seeds.get(p.paper_id) is None and is_added(p)]
    return Corpus(seeds.papers + kept, seeds.paragraphs + len(kept), seeds.files)


def add_seed_texts(store: Store[Any], settings: Settings, items: list[tuple[str, bytes]]) -> AddResult:
    """Add the abstracts of (file name, bytes) pairs, in any corpus format, that the index lacks,
    embedding only what is new, and publish them atomically (the previous state is never modified).
    They are recorded under fresh file names, added-<time>-<name><suffix>, so that a rebuild keeps them,
    and a retry after a crash adds each abstract once."""
    check_llm_titles(settings)
    files = added_files(items, settings)
    with store.writing(settings):
        current = store.load(settings)
        new = build_corpus((name, parse_file(raw, name)) for name, raw in files.items())
        held = store.held(current, new.by_id)
        fresh = [p for p in new.papers if p.paper_id not in held]
        duplicates = [p for p in new.papers if p.paper_id in held]
        if not fresh:
            return AddResult(None, [], duplicates)
        published = store.add(current, files, fresh, settings)
    return AddResult(published.where, fresh, duplicates, published.titles)
