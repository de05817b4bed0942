"""The limits and the logging around every request: one ASGI middleware (the log format: logs.py)."""

from __future__ import annotations

import logging
import time

from fastapi import HTTPException

from .errors import error_response
from .metrics import Metrics

log = logging.getLogger("rag.http")

ANSWER_PATHS = ("/ask", "/v1/chat/completions")


class LimitsAndLogging:
    """ASGI middleware: refuses bodies over the limit (declared or streamed) with 413 and answers
    beyond `max_answers` at once with 429, logs one JSON line per request (method, route,
    status, milliseconds, request id; never the question) and counts it for /metrics.

    Answers are counted here, around the whole request, because only here is the end certain:
    the count drops when the response is complete or the client has gone, streamed or not."""

    def __init__(
        self, app, max_body_bytes: int, max_chat_body_bytes: int, max_answers: int, in_flight: dict, metrics: Metrics
    ):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_chat_body_bytes = max_chat_body_bytes
        self.max_answers = max_answers
        self.in_flight = in_flight
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = {"code": 500}

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        answering = scope["path"] in ANSWER_PATHS and scope["method"] == "POST"
        if answering:
            self.in_flight["answers"] += 1
        # Chat UIs send whole conversations and tool definitions to /v1: a larger limit there.
        limit = self.max_chat_body_bytes if scope["path"] == "/v1/chat/completions" else self.max_body_bytes
        try:
            declared = dict(scope["headers"]).get(b"content-length", b"0")
            try:
                oversized = int(declared) > limit
            except ValueError:
                oversized = True
            if oversized:
                too_large = error_response(413, "body_too_large", f"request body is over {limit} bytes")
                await too_large(scope, receive, send_logged)
            elif answering and self.in_flight["answers"] > self.max_answers:
                busy = error_response(
                    429,
                    "too_many_answers",
                    f"{self.max_answers} answers are being served; retry shortly",
                    {"Retry-After": "1"},
                )
                await busy(scope, receive, send_logged)
            else:
                received = 0

                async def receive_limited():
                    nonlocal received
                    message = await receive()
                    received += len(message.get("body", b""))
                    if received > limit:
                        # FastAPI passes an HTTPException raised while reading the body through as is.
                        raise HTTPException(413, f"request body is over {limit} bytes")
                    return message

                await self.app(scope, receive_limited, send_logged)
        finally:
            if answering:
                self.in_flight["answers"] -= 1
            # The route's template ("/papers/{paper_id}"), not the path: one series per route.
            route = getattr(scope.get("route"), "path", None)
            seconds = time.perf_counter() - started
            self.metrics.request(route or "unrouted", scope["method"], status["code"], seconds)
            log.info(
                "request",
                extra={
                    "method": scope["method"],
                    "route": route or scope["path"],
                    "status": status["code"],
                    "ms": round(seconds * 1000, 1),
                },
            )
