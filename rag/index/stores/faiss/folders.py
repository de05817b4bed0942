"""The FAISS store's folders: builds written aside and published by one atomic rename, the
manifest that checks them, the writer lock, and recovery from a writer that was killed.

Layout under `index_dir`:

    current -> builds/<id>        a symlink, replaced atomically when a build completes
    builds/<id>/manifest.json     what was built from what, and a checksum of every file
    builds/.tmp-*                 a build being written (never loads; removed by `recover`)
    .writer.lock                  builds and adds take turns on it, across processes
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from rag.common.errors import IndexCorruptError, IndexNotFoundError, IndexWriteError
from rag.common.settings import Settings
from rag.index.corpus import file_hash
from rag.index.stores.base import REBUILD_HINT

PENDING = ".pending"


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _file_table(directory: Path, known: dict | None = None) -> dict:
    """Size and checksum of every file; `known` entries (the linked ONNX export, whose checksum
    the build already has) are taken as they are rather than hashed again (it is 90 MB)."""
    known = known or {}
    return {
        name: known.get(name) or {"size": p.stat().st_size, "sha256": sha256(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and (name := str(p.relative_to(directory))) != "manifest.json"
    }


@contextmanager
def writing(root: Path) -> Iterator[None]:
    """A write that fails (disk full, read-only folder, no permission) becomes one clear error;
    the build being written is dropped by `staging` and the current one is left as it was."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or root
        raise IndexWriteError(
            f"cannot write {where}: {exc.strerror or exc}; the current index is unchanged. "
            f"Free disk space or make {root} writable (or set RAG_INDEX_DIR to another folder), "
            f"then run `rag index` (or repeat the add)"
        ) from exc


@contextmanager
def staging(root: Path) -> Iterator[Path]:
    """A temporary build directory, removed if anything fails: builds/.tmp-* never loads, so a
    crash leaves the current build serving."""
    builds = root / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    work = builds / f".tmp-{uuid.uuid4().hex[:8]}"
    try:
        work.mkdir()
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def seal(work: Path, manifest: dict, linked: dict | None = None) -> Path:
    """Write the manifest last (a directory without one never loads), then give the build its
    final name; `publish` makes it current."""
    manifest["files"] = _file_table(work, linked)
    (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
    final = work.parent / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{manifest['corpus_hash'][:8]}-{uuid.uuid4().hex[:4]}"
    work.rename(final)
    return final


def publish(root: Path, build: Path) -> None:
    """Point `current` at `build` with one atomic rename, then drop all but the previous build."""
    link = root / "current"
    previous = link.resolve() if link.is_symlink() else None
    tmp_link = root / f".current-{uuid.uuid4().hex[:8]}"
    os.symlink(build.relative_to(root), tmp_link)
    os.replace(tmp_link, link)
    for old in (root / "builds").iterdir():
        if old != build and old != previous and not old.name.startswith(".tmp-"):
            shutil.rmtree(old, ignore_errors=True)


def current_build(settings: Settings) -> Path:
    link = Path(settings.indexing.index_dir) / "current"
    if not link.exists():
        raise IndexNotFoundError(f"no index at {settings.indexing.index_dir}: {REBUILD_HINT}")
    return link.resolve()


def read_manifest(build: Path, verify: bool = True) -> dict:
    """The build's manifest, after checking every file it lists against its size and, with
    `verify`, its checksum (`verify_checksums`)."""
    try:
        manifest = json.loads((build / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(f"{build / 'manifest.json'}: unreadable ({exc}); {REBUILD_HINT}") from exc
    for name, meta in manifest.get("files", {}).items():
        path = build / name
        if not path.is_file():
            raise IndexCorruptError(f"{path}: missing; {REBUILD_HINT}")
        if path.stat().st_size != meta["size"]:
            raise _modified(path)
    if verify:
        verify_checksums(build, manifest)
    return manifest


def verify_checksums(build: Path, manifest: dict) -> None:
    """Every file the manifest lists has the checksum it had when sealed (2.4 GB to read at
    100,000 papers: a replica runs this beside its load, hashlib leaving the GIL)."""
    for name, meta in manifest.get("files", {}).items():
        if sha256(build / name) != meta["sha256"]:
            raise _modified(build / name)


def _modified(path: Path) -> IndexCorruptError:
    return IndexCorruptError(f"{path}: truncated or modified since the build; {REBUILD_HINT}")


@contextmanager
def one_writer(root: Path, wait: bool = True) -> Iterator[bool]:
    """Builds from the seeds and adds of one index take turns, across processes: a rebuild
    reads the seed folder either before an add writes its file or after the add published,
    so it never publishes a build without papers that were added. Yields whether the lock is
    held (with `wait` False, False when another writer has it)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".writer.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


def pending_path(seeds_dir: Path, name: str) -> Path:
    """Where an add keeps a seed file until its build is published: hidden, and not *.txt, so
    no reader takes it for part of the corpus."""
    return Path(seeds_dir) / f".{name}{PENDING}"


def recover(settings: Settings) -> None:
    """Finish or undo what a killed writer left; call it holding the writer lock.

    A pending seed file joins the seed folder when the current build lists it (its add
    published) and is deleted otherwise (the index never held it): the folder and the index
    agree again, each added abstract in both or in neither. Half-written builds are deleted."""
    root, seeds = Path(settings.indexing.index_dir), Path(settings.indexing.seeds_dir)
    for staged in (root / "builds").glob(".tmp-*"):
        shutil.rmtree(staged, ignore_errors=True)
    pending = sorted(seeds.glob(f".*{PENDING}"))
    if not pending:
        return
    try:
        listed = read_manifest(current_build(settings), verify=False).get("seed_files", {})
    except (IndexNotFoundError, IndexCorruptError):
        listed = {}
    for path in pending:
        name = path.name[1 : -len(PENDING)]
        if listed.get(name) == file_hash(path.read_bytes()):
            os.replace(path, seeds / name)
        else:
            path.unlink()
