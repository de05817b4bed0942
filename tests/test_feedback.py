"""Ratings of answers, stored for real: an SQLite file under the index folder by default, and a
private PostgreSQL server on loopback shared by two workers; the CLI turns them into questions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from .conftest import ROOT, Server, free_port, index_env

QUESTION = "What speedup does Jacobi Forcing report?"


def ask(url: str, question: str = QUESTION) -> dict:
    deadline = time.monotonic() + 120  # with two workers, one may still be loading its index
    while (response := httpx.post(f"{url}/ask", json={"question": question}, timeout=60)).status_code == 503:
        assert response.json()["error"]["code"] == "loading" and time.monotonic() < deadline, response.text
        time.sleep(0.5)
    assert response.status_code == 200, response.text
    return response.json()


def rate(url: str, answer_id: str, rating: str, comment: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{url}/feedback", json={"answer_id": answer_id, "rating": rating, "comment": comment}, timeout=60
    )


def rag(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture()
def sqlite_env(index_dir, tmp_path) -> dict:
    return index_env(index_dir, RAG_FEEDBACK_DB=f"sqlite:///{tmp_path / 'feedback.db'}")


def test_a_rating_is_stored_with_its_answer_and_survives_a_restart(sqlite_env, tmp_path):
    first = Server(sqlite_env, tmp_path / "first.log")
    try:
        answer = ask(first.url)
        assert len(answer["answer_id"]) == 32
        stored = rate(first.url, answer["answer_id"], "down", "the speedup is for coding, not math")
        assert stored.status_code == 200, stored.text
        assert stored.json()["rating"] == "down" and stored.json()["comment"].startswith("the speedup")
        metrics = httpx.get(f"{first.url}/metrics").text
        assert 'rag_feedback_total{rating="down"} 1.0' in metrics
        other = ask(first.url, "What are the side effects of ibuprofen?")
    finally:
        first.stop()
    second = Server(sqlite_env, tmp_path / "second.log")
    try:  # the answers given before the restart can still be rated, and a second rating replaces the first
        assert rate(second.url, answer["answer_id"], "up").status_code == 200
        assert rate(second.url, other["answer_id"], "down", "it should say it does not know").status_code == 200
    finally:
        second.stop()
    exported = rag(sqlite_env, "feedback", "export")
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [(r["question"], r["notes"]["rating"]) for r in rows] == [
        (QUESTION, "up"),
        ("What are the side effects of ibuprofen?", "down"),
    ]
    jacobi = rows[0]
    assert jacobi["gold"] == [c["paper_id"] for c in answer["citations"]] and jacobi["history"] == []
    assert set(jacobi) == {"id", "type", "question", "history", "gold", "answer_keywords", "notes"}
    assert jacobi["notes"]["answer"] == answer["answer"] and jacobi["notes"]["confidence"] == answer["confidence"]
    down = tmp_path / "down.jsonl"
    assert rag(sqlite_env, "feedback", "export", "--rating", "down", "--out", str(down)).returncode == 0
    assert [json.loads(line)["notes"]["comment"] for line in down.read_text().splitlines()] == [
        "it should say it does not know"
    ]
    stats = json.loads(rag(sqlite_env, "feedback", "stats").stdout)
    assert stats["by_rating"] == {"up": 1, "down": 1}
    assert stats["by_confidence"] == {answer["confidence"]: {"up": 1}, other["confidence"]: {"down": 1}}


def test_the_default_database_is_a_file_in_the_index_folder(server_url, index_dir):
    answer = ask(server_url)
    assert rate(server_url, answer["answer_id"], "up").status_code == 200
    assert (index_dir / "feedback.db").is_file()


def test_a_plain_path_is_an_sqlite_file_and_a_failing_database_never_fails_an_answer(index_dir, tmp_path):
    path = tmp_path / "srv" / "rag" / "feedback.db"
    plain = Server(index_env(index_dir, RAG_FEEDBACK_DB=str(path)), tmp_path / "plain.log")
    try:
        answer = ask(plain.url)
        assert rate(plain.url, answer["answer_id"], "up").status_code == 200
    finally:
        plain.stop()
    assert path.is_file()

    closed = f"postgresql://rag:hunter2@127.0.0.1:{free_port()}/nothing"  # nothing listens there
    down = Server(index_env(index_dir, RAG_FEEDBACK_DB=closed), tmp_path / "down.log")
    try:
        for _ in range(2):
            assert ask(down.url)["answer"]
        assert rate(down.url, "0" * 32, "up").status_code == 503
        # the probe at start, then each answer not kept
        assert 'rag_part_failures_total{part="feedback"} 3.0' in httpx.get(f"{down.url}/metrics").text
        assert httpx.get(f"{down.url}/health").json()["parts"]["feedback"] == "failing"
    finally:
        down.stop()
    failed = [e for e in down.entries() if e["message"] == "part_failed"]
    assert [(e["part"], e["level"]) for e in failed] == [("feedback", "WARNING")], failed  # logged once
    assert "hunter2" not in failed[0]["error"] and "Traceback" not in down.log()


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"answer_id": "0" * 32, "rating": "up"}, 404, "no answer"),
        ({"rating": "up"}, 422, "answer_id"),
        ({"answer_id": "x", "rating": "meh"}, 422, "rating"),
        ({"answer_id": "x", "rating": "up", "comment": "x" * 2001}, 422, "comment"),
        ({"answer_id": "x" * 65, "rating": "up"}, 422, "answer_id"),
    ],
)
def test_bad_ratings_get_a_clear_error(server_url, body, status, says):
    response = httpx.post(f"{server_url}/feedback", json=body, timeout=30)
    assert response.status_code == status, response.text
    assert says in response.json()["error"]["message"]


def test_streamed_and_chat_answers_carry_their_id(server_url):
    with httpx.stream("POST", f"{server_url}/ask", json={"question": QUESTION, "stream": True}, timeout=60) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    done = json.loads(events[-1][6:])
    assert rate(server_url, done["answer_id"], "up").status_code == 200
    chat = httpx.post(
        f"{server_url}/v1/chat/completions",
        json={"model": "icml-rag", "messages": [{"role": "user", "content": QUESTION}]},
        timeout=60,
    ).json()
    assert rate(server_url, chat["answer_id"], "down").status_code == 200


class Postgres:
    """A private PostgreSQL server: `initdb` in a temporary folder, run as the `postgres` user
    (it refuses root), listening on 127.0.0.1 only."""

    def __init__(self):
        binaries = Path("/usr/lib/postgresql")
        found = sorted(binaries.glob("*/bin/initdb")) if binaries.is_dir() else []
        if not found or shutil.which("runuser") is None:
            pytest.skip("the PostgreSQL tests need Debian's postgresql (apt-get install postgresql) and runuser")
        self.bin = found[-1].parent
        # Not under pytest's folders: they are private to root, and the server runs as postgres.
        self.directory = Path(tempfile.mkdtemp(prefix="rag-postgres-"))
        shutil.chown(self.directory, "postgres")
        self.data, self.port = self.directory / "data", free_port()
        self.as_postgres("initdb", "-D", str(self.data), "-U", "rag", "--auth=trust", "-E", "UTF8")
        self.url = f"postgresql://rag@127.0.0.1:{self.port}/postgres"
        self.start()

    def as_postgres(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.data}"
        self.as_postgres("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.data / "log"), "-w", "start")

    def stop(self) -> None:
        self.as_postgres("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


@pytest.fixture()
def postgres():
    server = Postgres()
    yield server
    if (server.data / "postmaster.pid").exists():
        server.stop()
    shutil.rmtree(server.directory, ignore_errors=True)


def test_two_workers_share_a_postgresql_database_that_may_go_down(index_dir, postgres, tmp_path):
    env = index_env(index_dir, RAG_FEEDBACK_DB=postgres.url)
    command = [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", "{port}", "--workers", "2"]
    service = Server(env, tmp_path / "server.log", args=command)
    try:
        questions = [QUESTION, "Which papers analyze the Muon optimizer?", "What does MedScope do?"] * 4
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda q: ask(service.url, q), questions))
            rated = list(pool.map(lambda a: rate(service.url, a["answer_id"], "up").status_code, answers))
        assert rated == [200] * len(answers)  # whichever worker gave an answer, either can store its rating
        stats = json.loads(rag(env, "feedback", "stats").stdout)
        assert stats["by_rating"] == {"up": len(answers)}

        postgres.stop()
        answer = ask(service.url)  # answers go on; they are just not kept for rating
        down = rate(service.url, answers[0]["answer_id"], "down")
        assert down.status_code == 503, down.text
        error = down.json()["error"]
        assert error["code"] == "feedback_unavailable" and f"127.0.0.1:{postgres.port}" in error["message"]
        assert "Traceback" not in service.log()
        postgres.start()
        deadline = time.monotonic() + 30
        while (again := rate(service.url, answers[0]["answer_id"], "down")).status_code == 503:
            assert time.monotonic() < deadline, again.text
            time.sleep(0.5)
        assert again.status_code == 200
        assert rate(service.url, answer["answer_id"], "up").status_code == 404  # given while the database was down
    finally:
        service.stop()
    assert json.loads(rag(env, "feedback", "stats").stdout)["by_rating"] == {"up": len(answers) - 1, "down": 1}


def test_answers_kept_for_rating_are_bounded_by_count_and_age(tmp_path):
    from rag.assistant import Answer
    from rag.common.errors import UnknownAnswerError
    from rag.common.settings import Settings
    from rag.feedback import PRUNE_EVERY, FeedbackStore

    def given(store: FeedbackStore) -> Answer:
        answer = Answer("an answer", [], False, "q", "extractive", question="a question")
        store.keep(answer)
        return answer

    by_count = FeedbackStore(Settings(index_dir=tmp_path / "count", feedback_keep_answers=3))
    answers = [given(by_count) for _ in range(PRUNE_EVERY + 1)]  # the last one prunes
    for old in answers[:-3]:
        with pytest.raises(UnknownAnswerError):
            by_count.rate(old.answer_id, "up")
    assert all(by_count.rate(a.answer_id, "up")["rating"] == "up" for a in answers[-3:])

    by_age = FeedbackStore(Settings(index_dir=tmp_path / "age", feedback_keep_hours=1 / 3600))  # one second
    answer = given(by_age)
    time.sleep(1.2)
    with pytest.raises(UnknownAnswerError, match="0.000277778 hours"):
        by_age.rate(answer.answer_id, "up")
