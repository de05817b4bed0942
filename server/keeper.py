"""The assistant the routes answer with, and every way it is replaced.

One object owns it: it loads the last good build at start, catches the index up with the seed
folder behind it, follows builds that other processes (`rag add`, other workers) publish, and
swaps in the build an add made. A swap is one attribute assignment: a request holds the old
assistant or the new one, whole, and the old one serves until the new one is ready.
"""

from __future__ import annotations

import logging
import threading
import time

from rag.assistant import Answer, Assistant
from rag.common.errors import RagError, StoreUnavailableError
from rag.common.parts import PARTS
from rag.common.settings import Settings
from rag.common.text import tagger
from rag.feedback import FeedbackStore
from rag.index.stores import add_seed_texts, index_seeds, load_index, open_index, seeds_changed
from rag.index.stores.base import AddResult, SeedChanges
from rag.query import language

from .errors import ApiError
from .metrics import Metrics

log = logging.getLogger("rag.http")


class AssistantKeeper:
    def __init__(self, settings: Settings, metrics: Metrics, feedback: FeedbackStore):
        self.settings = settings
        self.metrics = metrics
        self.feedback = feedback
        self.assistant: Assistant | None = None
        self.error: RagError | None = None  # why there is no assistant, once nothing more is tried
        self.unusable: str | None = None  # why the build on disk could not serve, while another is built
        self.catching_up = False
        self.pending_papers = 0
        self._adding = threading.Lock()

    def _make(self, loaded=None) -> Assistant:
        """The one place an index becomes an assistant (start, catch-up, reload, add)."""
        made = Assistant(loaded or load_index(self.settings), self.settings, observer=self._observe)
        tagger(self.settings.judging.tagger_model)  # rag/query/framing.py: before the first question, not on it
        language.load()  # rag/query/language.py: the same
        PARTS.set("store", "ok")
        self.metrics.index(made.index)
        return made

    def _observe(self, answer: Answer) -> None:
        """Each answer given: counted, and kept so that it can be rated (optional parts: neither
        fails the answer); whether the LLM answered or the extractive fallback stood in."""
        self.metrics.answer(answer)
        self.feedback.keep(answer)
        if answer.fallback:
            PARTS.set("llm", "failing")
        elif answer.generator == "llm":
            PARTS.set("llm", "ok")

    def start(self) -> threading.Thread:
        """Serve first, catch up behind: load the last good build, then bring the index in line
        with the seed folder (a first build when there is no usable one) and switch to it; and
        from then on follow what other processes publish."""
        thread = threading.Thread(target=self._start, name="load-index", daemon=True)
        thread.start()
        threading.Thread(target=self._follow, name="follow-index", daemon=True).start()
        return thread

    def _start(self) -> None:
        self.catching_up = True
        try:
            try:
                self.assistant = self._make(open_index(self.settings))
                log.info("ready", extra={"index": str(self.assistant.index.path)})
                if not seeds_changed(self.settings, self.assistant.index):
                    return  # nothing to catch up (and a read-only index folder is fine)
                self.pending_papers = self._pending(self.assistant)
            except RagError as exc:  # no usable build: 503 "loading" while a new one is built
                self.unusable = str(exc)
                log.info("no_usable_index", extra={"code": exc.code, "reason": self.unusable})
            report = index_seeds(self.settings, only_if_stale=True)
            if report.build is not None:
                self.assistant = self._make()
                log.info(
                    "caught_up",
                    extra={
                        "index": str(report.build),
                        "reason": report.reason,
                        "added": report.added,
                        "removed": report.removed,
                        "seconds": round(report.seconds, 2),
                    },
                )
        except Exception as exc:  # the last good build keeps serving; without one, /health says why
            error = exc if isinstance(exc, RagError) else RagError(f"cannot load the index: {exc}")
            log.error("catch_up_failed", extra={"error": str(error)})
            if isinstance(exc, StoreUnavailableError):
                PARTS.set("store", "unreachable")
            if self.assistant is None:
                self.error = error
        finally:
            self.catching_up = False
            self.pending_papers = 0

    def _pending(self, assistant: Assistant) -> int:
        from rag.index.corpus import load_corpus

        return SeedChanges.between(assistant.index.corpus, load_corpus(self.settings.indexing.seeds_dir)).pending

    def get(self) -> Assistant:
        """The assistant to answer with, or a 503 that says why there is none yet."""
        if self.assistant is None:
            if self.error is not None:
                raise ApiError(503, self.error.code, str(self.error))
            message = "the index is still loading; retry in a few seconds"
            if self.unusable:
                message = f"building an index from the seed folder, because {self.unusable}; retry in a few seconds"
            raise ApiError(503, "loading", message, {"Retry-After": "2"})
        return self.assistant

    def _follow(self) -> None:
        """Runs for the life of the process: when another process (a worker, a replica, `rag
        add`) publishes a build or an add, load it and switch; until then the loaded one keeps
        serving. Checked every `follow_seconds`, requests or not."""
        said = None
        while True:
            time.sleep(self.settings.store.follow_seconds)
            if self.assistant is None or self.catching_up or self._adding.locked():
                continue
            try:
                if not self.assistant.index.is_current():
                    self.assistant = self._make()
                    log.info("reloaded", extra={"index": str(self.assistant.index.path)})
                said = None
            except Exception as exc:  # the previous index keeps serving; each new failure is logged once
                if str(exc) != said:
                    log.error("reload_failed", extra={"error": str(exc)})
                said = str(exc)

    def add(self, items: list[tuple[str, bytes]]) -> AddResult:
        """Add seed-format files (blocking: call it off the event loop) and switch to the result."""
        with self._adding:
            result = add_seed_texts(self.settings, items)
            if result.build is not None:
                self.assistant = self._make()
        return result
