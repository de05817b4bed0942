"""The service itself: health and probes, metrics, the web page."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from rag.common.parts import PARTS

from ..dependencies import authorised, keeper
from ..errors import ApiError, errors
from ..keeper import AssistantKeeper
from ..schemas import Health, Liveness

STATIC = Path(__file__).resolve().parent.parent / "static"  # the page; app.py serves the folder at /static

router = APIRouter()


@router.get("/health", response_model=Health, responses=errors(503))
async def health(request: Request, keeper: AssistantKeeper = Depends(keeper)):
    """The index in use; while the service catches up with the seed folder it serves the last
    good build and says how many papers are still to add or remove. `parts`: the state of each
    part an answer can do without or that is reached over the network (its 503 says them too)."""
    try:
        ready = keeper.get()
    except ApiError as exc:
        body = {"error": {"code": exc.code, "message": exc.message}, "parts": dict(PARTS.states)}
        return JSONResponse(body, status_code=exc.status, headers=exc.headers)
    return Health(
        status="ok",
        papers=len(ready.index.corpus),
        chunks=ready.index.chunks,
        embedding_model=ready.index.manifest["embedding_model"],
        store=ready.index.store,
        generator=ready.generator.name,
        answers_in_flight=request.app.state.in_flight["answers"],
        catching_up=keeper.catching_up,
        pending_papers=keeper.pending_papers,
        parts=dict(PARTS.states),
    )


@router.get("/livez", response_model=Liveness)
async def livez():
    """The process answers (for a liveness probe: restart it when this fails)."""
    return Liveness(status="alive")


@router.get("/readyz", response_model=Health, responses=errors(503))
async def readyz(request: Request, keeper: AssistantKeeper = Depends(keeper)):
    """An index is loaded and answers can be served (for a readiness probe); 503 while loading."""
    return await health(request, keeper)


@router.get("/", include_in_schema=False)
async def page():
    return FileResponse(STATIC / "index.html")


@router.get("/metrics", include_in_schema=False, dependencies=[Depends(authorised)])
async def prometheus_metrics(request: Request):
    metrics = request.app.state.metrics
    return Response(metrics.render(), media_type=metrics.content_type)
