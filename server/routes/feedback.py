"""Ratings of answers: POST /feedback stores one, with the answer it rates (rag/feedback.py)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from ..dependencies import authorised
from ..errors import errors
from ..schemas import FeedbackRequest, FeedbackResponse

router = APIRouter(dependencies=[Depends(authorised)], responses=errors(401))


@router.post("/feedback", response_model=FeedbackResponse, responses=errors(400, 404, 422, 503))
async def feedback(body: FeedbackRequest, request: Request):
    """Rate an answer (up or down, with an optional comment); a second rating replaces the first."""
    stored = await run_in_threadpool(request.app.state.feedback.rate, body.answer_id, body.rating, body.comment)
    request.app.state.metrics.feedback.labels(body.rating).inc()
    return stored
