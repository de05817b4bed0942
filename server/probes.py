"""At start, can the parts this service talks to be reached: the LLM endpoint, the feedback
database, a Milvus server? One that cannot is a warning in the log and a state in /health's
`parts`, never a refusal to start (a setting that cannot work at all stops start-up earlier, in
rag/common/settings.py). Each runs in the background: the port opens at once."""

from __future__ import annotations

import threading

import httpx

from rag.answer.generator import uses_llm
from rag.common.parts import PARTS
from rag.common.settings import Settings
from rag.feedback import FeedbackStore

PROBE_SECONDS = 3.0  # how long a probe waits for an answer before calling the part unreachable


def _llm(settings: Settings) -> None:
    """Any HTTP answer from the endpoint's model list means it is there (a 401 is the key's problem)."""
    base = (settings.llm.base_url or "https://api.openai.com/v1").rstrip("/")
    headers = {"Authorization": f"Bearer {settings.llm.api_key}"} if settings.llm.api_key else {}
    httpx.get(f"{base}/models", headers=headers, timeout=PROBE_SECONDS)


def _milvus(settings: Settings) -> None:
    from rag.index.stores.milvus.collections import connect, milvus_errors

    with milvus_errors(settings):
        connect(settings.model_copy(update={"milvus_timeout": PROBE_SECONDS})).list_collections()


def initial_states(settings: Settings) -> None:
    """What /health says before the probes have answered."""
    for part in ("metrics", "suggestions", "mcp"):
        PARTS.set(part, "ok")
    for part in ("feedback", "store"):
        PARTS.set(part, "unknown")
    PARTS.set("llm", "unknown" if uses_llm(settings) else "off")


def import_store_client(settings: Settings) -> None:
    """Import the Milvus client before any thread does: pymilvus imported by two threads at once
    (the index loader, the store probe) can meet its own modules half initialised."""
    if settings.store.vector_store == "milvus":
        import rag.index.stores.milvus.collections  # noqa: F401


def probe_parts(settings: Settings, feedback: FeedbackStore) -> threading.Thread:
    def probe() -> None:
        if uses_llm(settings):
            PARTS.probe("llm", lambda: _llm(settings))
        if settings.feedback_url.startswith("sqlite"):
            PARTS.set("feedback", "ok")  # a file made on first use (its folder was checked at start)
        else:
            PARTS.probe("feedback", feedback.check)
        if settings.store.vector_store == "milvus" and "://" in settings.milvus_address:
            PARTS.probe("store", lambda: _milvus(settings))

    thread = threading.Thread(target=probe, name="probe-parts", daemon=True)
    thread.start()
    return thread
