"""Ratings of answers, kept as evaluation data: every answer given is remembered for a while
(bounded by count and age) so that it can be rated, and a rating is stored with the question,
the conversation, the answer, its citations and its confidence.

Through SQLAlchemy: an SQLite file by default, or a PostgreSQL URL that several replicas share.
Two tables: `answers` (recent answers, pruned) and `ratings` (one per rated answer, kept; a second
rating of the same answer replaces the first). A database that fails never fails an answer: keeping
it is an optional part (rag/common/parts.py), so the answer is given and not kept; only rating it fails,
with FeedbackUnavailableError.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rag.common.errors import FeedbackUnavailableError, UnknownAnswerError
from rag.common.parts import PARTS
from rag.common.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from rag.assistant import Answer

Rating = Literal["up", "down"]
PRUNE_EVERY = 100  # answers kept between two prunings: the table holds at most keep_answers + this


def _tables():
    from sqlalchemy import JSON, Column, DateTime, MetaData, String, Table, Text

    metadata = MetaData()
    answers = Table(
        "answers",
        metadata,
        Column("answer_id", String(32), primary_key=True),
        Column("given_at", DateTime(timezone=True), nullable=False, index=True),
        Column("record", JSON, nullable=False),
    )
    ratings = Table(
        "ratings",
        metadata,
        Column("answer_id", String(32), primary_key=True),
        Column("rated_at", DateTime(timezone=True), nullable=False),
        Column("rating", String(8), nullable=False),
        Column("comment", Text, nullable=True),
        Column("record", JSON, nullable=False),
    )
    return metadata, answers, ratings


def _url(url: str) -> str:
    """postgresql://... through psycopg 3 (SQLAlchemy's default driver for it is psycopg2)."""
    return "postgresql+psycopg://" + url.removeprefix("postgresql://") if url.startswith("postgresql://") else url


class FeedbackStore:
    """The answers that may be rated and the ratings given. Thread-safe; one per process."""

    def __init__(self, settings: Settings):
        self.url = settings.feedback_url
        self.keep_answers = settings.feedback.keep_answers
        self.keep_for = timedelta(hours=settings.feedback.keep_hours)
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._kept = 0
        self.metadata, self.answers, self.ratings = _tables()

    @contextmanager
    def _connection(self) -> Iterator:
        """A transaction on the database (created on first use); any database failure becomes
        FeedbackUnavailableError, with the database named but not its password."""
        from sqlalchemy import create_engine, event
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import SQLAlchemyError

        where = "RAG_FEEDBACK_DB"
        try:
            url = make_url(_url(self.url))
            where = url.render_as_string(hide_password=True)
            with self._lock:
                if self._engine is None:
                    if url.get_backend_name() == "sqlite" and url.database:  # its folder may not exist yet
                        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
                    engine = create_engine(url, pool_pre_ping=True)
                    if engine.dialect.name == "sqlite":
                        event.listen(engine, "connect", _sqlite_pragmas)
                    try:
                        self.metadata.create_all(engine)
                    except SQLAlchemyError:  # another worker created them at the same moment
                        self.metadata.create_all(engine)
                    self._engine = engine
            with self._engine.begin() as connection:
                yield connection
        except (SQLAlchemyError, OSError) as exc:  # a URL it cannot parse (ArgumentError) included
            raise FeedbackUnavailableError(
                f"the feedback database at {where} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
            ) from exc

    def check(self) -> None:
        """Connect (creating the tables): at start, to warn early about a database that is down."""
        with self._connection():
            pass

    @PARTS.guard("feedback")
    def keep(self, answer: Answer) -> None:
        """Remember a given answer so that it can be rated; never raises (the failure is logged and counted)."""
        from sqlalchemy import delete, select

        record = {
            "question": answer.question,
            "history": answer.history,
            "answer": answer.text,
            "citations": [c.to_dict() for c in answer.citations],
            "confidence": answer.confidence,
            "missing": answer.missing,
            "generator": answer.generator,
        }
        now = datetime.now(UTC)
        with self._connection() as db:
            db.execute(self.answers.insert().values(answer_id=answer.answer_id, given_at=now, record=record))
            self._kept += 1
            if self._kept % PRUNE_EVERY == 1:
                db.execute(delete(self.answers).where(self.answers.c.given_at < now - self.keep_for))
                newest = select(self.answers.c.answer_id).order_by(self.answers.c.given_at.desc())
                db.execute(
                    delete(self.answers).where(
                        self.answers.c.answer_id.not_in(newest.limit(self.keep_answers).scalar_subquery())
                    )
                )

    def rate(self, answer_id: str, rating: Rating, comment: str | None = None) -> dict:
        """Store the rating of a kept answer (replacing an earlier one); returns what was stored."""
        from sqlalchemy import delete, select

        now = datetime.now(UTC)
        with self._connection() as db:
            row = db.execute(
                select(self.answers.c.record, self.answers.c.given_at).where(self.answers.c.answer_id == answer_id)
            ).first()
            if row is None or _aware(row.given_at) < now - self.keep_for:
                raise UnknownAnswerError(
                    f"no answer {answer_id!r} to rate: answers can be rated for "
                    f"{self.keep_for.total_seconds() / 3600:g} hours after they are given"
                )
            db.execute(delete(self.ratings).where(self.ratings.c.answer_id == answer_id))
            db.execute(
                self.ratings.insert().values(
                    answer_id=answer_id, rated_at=now, rating=rating, comment=comment, record=row.record
                )
            )
        return {"answer_id": answer_id, "rating": rating, "comment": comment, "rated_at": now.isoformat()}

    def rated(self, rating: Rating | None = None) -> list[dict]:
        """Every rating (or those of one kind), oldest first, each with the answer it rates."""
        from sqlalchemy import select

        query = select(self.ratings).order_by(self.ratings.c.rated_at)
        if rating is not None:
            query = query.where(self.ratings.c.rating == rating)
        with self._connection() as db:
            rows = db.execute(query).all()
        return [
            {
                "answer_id": r.answer_id,
                "rating": r.rating,
                "comment": r.comment,
                "rated_at": _aware(r.rated_at).isoformat(),
                **r.record,
            }
            for r in rows
        ]


def _sqlite_pragmas(connection, _) -> None:
    """Writers from several workers wait for each other rather than fail; WAL with NORMAL sync
    makes keeping an answer a fraction of a millisecond instead of an fsync (~10 ms) per answer."""
    connection.execute("PRAGMA busy_timeout = 10000")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")


def _aware(moment: datetime) -> datetime:
    """SQLite hands datetimes back without their zone (they were stored in UTC)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def as_questions(ratings: list[dict]) -> Iterator[str]:
    """Ratings as JSON lines in the dev split's question format, for a person to review into
    eval/data/dev.jsonl: the cited papers are candidate gold, the answer keywords are left to fill."""
    for r in ratings:
        yield json.dumps(
            {
                "id": f"feedback-{r['answer_id'][:12]}",
                "type": "feedback",
                "question": r["question"],
                "history": r["history"],
                "gold": [c["paper_id"] for c in r["citations"]],
                "answer_keywords": [],
                "notes": {
                    "rating": r["rating"],
                    "comment": r["comment"],
                    "confidence": r["confidence"],
                    "answer": r["answer"],
                    "rated_at": r["rated_at"],
                },
            },
            ensure_ascii=False,
        )


def summary(ratings: list[dict]) -> dict:
    """Counts by rating and by the confidence of the rated answer."""
    by_rating: dict[str, int] = {}
    by_confidence: dict[str, dict[str, int]] = {}
    for r in ratings:
        by_rating[r["rating"]] = by_rating.get(r["rating"], 0) + 1
        counts = by_confidence.setdefault(r["confidence"], {})
        counts[r["rating"]] = counts.get(r["rating"], 0) + 1
    return {"ratings": len(ratings), "by_rating": by_rating, "by_confidence": by_confidence}
