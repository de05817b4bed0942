"""The optional parts of answering: keeping an answer for feedback, counting it for /metrics,
suggesting next questions, the MCP mount; and the services the process talks to (the LLM
endpoint, the vector store). An answer never fails because one of them does.

Every call into an optional part goes through `PARTS.call` (or a method decorated with
`PARTS.guard`): a failure is logged (once per distinct error, again after the part has worked),
counted by part (/metrics reads the counts) and the part's state kept for /health; the caller
gets a stand-in value and goes on. One registry per process, like the process's logging.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

log = logging.getLogger("rag.parts")

OptionalPart = Literal["feedback", "metrics", "suggestions", "mcp"]
State = Literal["ok", "off", "unknown", "unreachable", "failing"]
T = TypeVar("T")


class InjectedFault(RuntimeError):
    """Raised in place of a part named in RAG_FAIL_PARTS (fault tests only)."""


class Parts:
    def __init__(self) -> None:
        self.states: dict[str, State] = {}
        self.failures: dict[str, int] = {}
        self.failing: frozenset[str] = frozenset()
        self._said: dict[str, str] = {}
        self._lock = threading.Lock()

    def inject(self, parts: Iterable[str]) -> None:
        """Fault tests only: these parts raise on every call from now on."""
        self.failing = frozenset(parts)

    def _fault(self, part: str) -> None:
        if part in self.failing:
            raise InjectedFault(f"{part} fails on purpose (RAG_FAIL_PARTS)")

    def set(self, part: str, state: State) -> None:
        self.states[part] = state
        if state in ("ok", "off"):
            self._said.pop(part, None)

    def failed(self, part: str, error: BaseException, state: State = "failing", level: int = logging.ERROR) -> None:
        """Count a failure, keep the state, and log it unless this very error was logged last."""
        first_line = next(iter(str(error).splitlines()), "")
        message = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
        with self._lock:
            self.failures[part] = self.failures.get(part, 0) + 1
            self.states[part] = state
            said, self._said[part] = self._said.get(part), message
        if said != message:
            log.log(level, "part_failed", extra={"part": part, "state": state, "error": message})

    def call(self, part: str, fn: Callable[..., T], *args: Any, fallback: Callable[[], Any] = lambda: None) -> T:
        """`fn(*args)`, or `fallback()` when it raises (the failure logged and counted)."""
        try:
            self._fault(part)
            result = fn(*args)
        except Exception as exc:
            self.failed(part, exc)
            return fallback()
        if self.states.get(part) != "ok":
            self.set(part, "ok")
        return result

    def guard(self, part: OptionalPart, fallback: Callable[[], Any] = lambda: None):
        """Decorate a function whose failure must not fail its caller."""

        def decorate(fn: Callable[..., T]) -> Callable[..., T]:
            @functools.wraps(fn)
            def guarded(*args: Any) -> T:
                return self.call(part, fn, *args, fallback=fallback)

            return guarded

        return decorate

    def probe(self, part: str, check: Callable[[], object]) -> State:
        """At start: can the part be reached? A failure is a warning, never a refusal to start."""
        try:
            self._fault(part)
            check()
        except Exception as exc:
            self.failed(part, exc, state="unreachable", level=logging.WARNING)
        else:
            self.set(part, "ok")
        return self.states[part]


PARTS = Parts()
