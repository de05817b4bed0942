"""The FAISS store (the embedded default): each state of the index is a build folder under
`RAG_INDEX_DIR` on one machine, and the seed folder is the record of the papers (an add writes
its abstracts there as a seed file, atomically with the build that holds them).

A build writes into a temporary folder and only then moves `current`, so a crash mid-build
leaves the previous index serving and no half index that loads (folders.py); reader.py loads a
build, build.py writes one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from rag.common.errors import IndexCorruptError, IndexNotFoundError, IndexStaleError
from rag.common.settings import Settings
from rag.index.corpus import Corpus, Paper, load_corpus, seed_files
from rag.index.stores.base import Published, check_parameters, pause_point, titles_of
from rag.index.stores.faiss import folders
from rag.index.stores.faiss.build import build_index, write_build
from rag.index.stores.faiss.reader import LoadedIndex, load_index

if TYPE_CHECKING:
    from rag.index.ray_embedding import RayEmbedding

__all__ = ["FaissStore", "LoadedIndex", "build_index", "load_index"]


def _published(build: Path) -> Published:
    manifest = folders.read_manifest(build, verify=False)
    return Published(build, manifest["chunks"], manifest["papers"], titles_of(manifest))


class FaissStore:
    name = "faiss"
    records_adds = False

    def load(self, settings: Settings, check: bool = True) -> LoadedIndex:
        return load_index(settings, check=check)

    def open(self, settings: Settings) -> LoadedIndex:
        """First `recover` from writers that died, unless a writer is at work (then what it left
        is not dead) or the folders are read-only (then nobody can have left anything)."""
        root = Path(settings.indexing.index_dir)
        if root.is_dir() and Path(settings.indexing.seeds_dir).is_dir():
            with suppress(OSError), folders.one_writer(root, wait=False) as held:
                if held:
                    folders.recover(settings)
        return load_index(settings)

    @contextmanager
    def writing(self, settings: Settings) -> Iterator[None]:
        root = Path(settings.indexing.index_dir)
        with folders.writing(root), folders.one_writer(root):
            folders.recover(settings)
            yield

    def up_to_date(self, settings: Settings, seeds: Corpus) -> bool:
        try:
            build = folders.current_build(settings)
            manifest = folders.read_manifest(build, verify=False)
            check_parameters(manifest, settings)
            if manifest.get("corpus_hash") != seeds.content_hash or manifest.get("seed_files") != seeds.files:
                return False
            folders.read_manifest(build)  # and undamaged (a load checks otherwise)
            return True
        except (IndexNotFoundError, IndexStaleError, IndexCorruptError):
            return False

    def build(self, corpus: Corpus, settings: Settings, show_progress: bool, remote: RayEmbedding | None) -> Published:
        return _published(write_build(corpus, settings, show_progress, None, remote))

    def catch_up(
        self,
        previous: LoadedIndex,
        seeds: Corpus,
        added: list[Paper],
        removed: list[str],
        settings: Settings,
        show_progress: bool,
        remote: RayEmbedding | None,
    ) -> Published:
        """A new build of the seeds that embeds only what `previous` lacks; always written, so
        that its manifest records the seed files as they are now."""
        return _published(write_build(seeds, settings, show_progress, previous, remote))

    def held(self, index: LoadedIndex, paper_ids: Iterable[str]) -> set[str]:
        return {pid for pid in paper_ids if index.corpus.get(pid) is not None}  # the writer lock is held

    def add(self, index: LoadedIndex, files: dict[str, bytes], papers: list[Paper], settings: Settings) -> Published:
        """Each file joins the seed folder (the corpus of record) atomically with the build: it
        waits hidden as `.<name>.pending` and is moved into place once the build that holds its
        papers is current. An add killed at any point leaves both the folder and the index with
        its abstracts, or neither (`folders.recover` finishes or undoes it)."""
        seeds = Path(settings.indexing.seeds_dir)
        try:
            for name, raw in files.items():
                folders.pending_path(seeds, name).write_bytes(raw)
            pause_point(settings, "seed-written")
            build = write_build(load_corpus(seeds, extra=files), settings, False, index)
        except BaseException:
            for name in files:
                folders.pending_path(seeds, name).unlink(missing_ok=True)
            raise
        pause_point(settings, "after-publish")
        for name in files:
            os.replace(folders.pending_path(seeds, name), seeds / name)
        return _published(build)

    def seeds_changed(self, settings: Settings, index: LoadedIndex) -> bool:
        """File checksums only: cheap enough to ask before every CLI answer."""
        return index.manifest.get("seed_files") != seed_files(settings.indexing.seeds_dir)
