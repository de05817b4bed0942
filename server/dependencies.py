"""What routes ask for: the settings, the API key check, the assistant to answer with.

Each is `async`: they only read state, and FastAPI runs a plain `def` dependency in the thread
pool, a hand-off per dependency per request."""

from __future__ import annotations

import secrets

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from rag.assistant import Assistant
from rag.common.settings import Settings

from .errors import ApiError
from .keeper import AssistantKeeper

# FastAPI's scheme declares the key in the OpenAPI document (an Authorize button in /docs);
# auto_error off: a missing key gets our 401 envelope, and none is needed without RAG_API_KEY.
bearer = HTTPBearer(auto_error=False, description="RAG_API_KEY, when the service has one")


async def settings(request: Request) -> Settings:
    return request.app.state.settings


async def keeper(request: Request) -> AssistantKeeper:
    return request.app.state.keeper


async def authorised(
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer), settings: Settings = Depends(settings)
) -> None:
    if not settings.service.api_key:
        return
    if credentials is None or not secrets.compare_digest(credentials.credentials.strip(), settings.service.api_key):
        raise ApiError(
            401,
            "unauthorized",
            "this service needs `Authorization: Bearer <RAG_API_KEY>`",
            {"WWW-Authenticate": "Bearer"},
        )


async def assistant(keeper: AssistantKeeper = Depends(keeper)) -> Assistant:
    """503 "loading" (with Retry-After) until a usable build is loaded."""
    return keeper.get()
