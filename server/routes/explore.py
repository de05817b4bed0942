"""Exploring the papers: the map of every paper and topic (/map), and a paper's similar papers
(/papers/{paper_id}/similar), both computed from what indexing stored."""

from __future__ import annotations

import gzip
import json
import threading

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from rag.common.limits import MAX_K
from rag.common.settings import Settings
from rag.index.stores.base import SearchIndex
from rag.retrieve.similar import similar_papers

from ..dependencies import assistant, authorised, settings
from ..errors import errors
from ..schemas import MapResponse, SimilarResponse

router = APIRouter(dependencies=[Depends(authorised)], responses=errors(401))


class _MapBody:
    """/map's JSON, encoded and compressed once per state of the index: at 100,000 papers,
    encoding it for each request would cost most of a second."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._for: str | None = None
        self.plain = self.gzipped = b""

    def of(self, index: SearchIndex) -> _MapBody:
        with self._lock:
            if self._for != index.version:
                self.plain = json.dumps(_map(index), ensure_ascii=False, separators=(",", ":")).encode()
                self.gzipped = gzip.compress(self.plain, compresslevel=6, mtime=0)
                self._for = index.version
            return self


def _map(index: SearchIndex) -> dict:
    topic_map, sizes = index.topic_map, index.topic_map.sizes()
    papers = []
    for paper in index.corpus.papers:
        place = topic_map.places[paper.paper_id]
        papers.append(
            {
                "paper_id": paper.paper_id,
                "name": paper.display_name,
                "x": round(place.x, 4),
                "y": round(place.y, 4),
                "topic": place.topic,
            }
        )
    topics = [
        {"id": t.id, "label": t.label, "words": t.words, "size": sizes[t.id], "other": t.other}
        for t in topic_map.topics
    ]
    return {"papers": papers, "topics": topics}


_MAP = _MapBody()


@router.get("/map", response_model=MapResponse, responses=errors(503))
async def paper_map(request: Request, ready=Depends(assistant)):
    """Every paper's place on the map and topic, and the topics with their labels and sizes
    (computed when indexing). gzip-compressed when the client accepts it; the ETag names the
    state of the index, so a client that has it gets 304."""
    index = ready.index
    tag = f'"{index.version}"'
    if request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers={"ETag": tag})
    body = await run_in_threadpool(_MAP.of, index)
    headers = {"ETag": tag, "Vary": "Accept-Encoding", "Cache-Control": "no-cache"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(body.gzipped, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"})
    return Response(body.plain, media_type="application/json", headers=headers)


@router.get("/papers/{paper_id}/similar", response_model=SimilarResponse, responses=errors(404, 422, 503))
async def similar(
    paper_id: str,
    k: int = Query(5, ge=1, le=MAX_K, description="How many similar papers."),
    ready=Depends(assistant),
    settings: Settings = Depends(settings),
):
    """The papers nearest to this one by their vectors, closest first, each with the pair of
    sentences (one of each abstract) that are most alike."""
    index = ready.index
    found = await run_in_threadpool(similar_papers, index, paper_id, k, settings)
    places = index.topic_map.places
    return {
        "paper_id": paper_id,
        "similar": [
            {
                "paper_id": s.paper.paper_id,
                "name": s.paper.display_name,
                "code_url": s.paper.code_url,
                "topic": place.topic if (place := places.get(s.paper.paper_id)) else None,
                "score": s.score,
                "pair": {"asked": s.sentence, "similar": s.other_sentence, "score": s.sentence_score},
            }
            for s in found
        ],
    }
