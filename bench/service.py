"""Service benchmarks on this machine, each figure beside what bounds it, measured in one run:

* ingest: chunk embedding inside our build vs raw sentence-transformers `encode` of the same
  chunks (ratio), and the whole build in abstracts/s;
* latency: /search and /ask over HTTP vs the same call in-process (p50, p95), and the first SSE
  token of a streamed /ask;
* load: 16 connections on /search for a fixed time with 1 and 2 uvicorn workers (wrk when
  installed, else a bounded Python client), against the limit set by the work itself
  (cores / in-process time of the load's own search, its question on one thread);
* cold start: process start to a healthy /health, with a built index;
* memory: peak RSS of the serving process.

    .venv/bin/python -m bench.service            # about 4 minutes
    .venv/bin/python -m bench.service --quick --index-dir index   # a smoke run, about 40 s

Prints a table and writes bench/results/service.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent

import httpx  # noqa: E402  (after HF_HUB_OFFLINE is set)

from bench.serving import Served  # noqa: E402

QUERIES = [
    "rotary embeddings for vision transformers",
    "caching for diffusion language models",
    "What speedup does Jacobi Forcing report?",
    "medical audio question answering",
    "watermark removal attacks",
    "protein interaction prediction",
    "safe robot navigation decoding",
    "quantization of vision-language models",
    "spiking neural networks conversion",
    "loss spikes with Adam",
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values_ms: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(values_ms), 2), "p95_ms": round(pct(values_ms, 0.95), 2)}


def bench_ingest(settings, chunks: int | None, full_build: bool) -> dict:
    """`chunks` limits the ratio to the first chunks (smoke runs); `full_build` times a build too."""
    from sentence_transformers import SentenceTransformer

    from rag.index.chunking import chunk_papers
    from rag.index.corpus import load_corpus
    from rag.index.embedding import load_embedder, resolve_model_path
    from rag.index.stores.faiss.build import EncoderTables, build_index

    corpus = load_corpus(settings.indexing.seeds_dir)
    embedder = load_embedder(settings.indexing.embedding_model)
    nodes = chunk_papers(
        corpus.papers, embedder._model.tokenizer.tokenize, settings.indexing.chunk_size, settings.indexing.chunk_overlap
    )
    nodes = nodes[:chunks]
    texts = [n.get_content() for n in nodes]
    raw_model = SentenceTransformer(str(resolve_model_path(settings.indexing.embedding_model)), device="cpu")
    raw_model.encode(texts[:8])
    started = time.perf_counter()
    raw_model.encode(texts, batch_size=32)
    raw_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        dense = EncoderTables(embedder, Path(tmp) / "sentences.npy", 0, settings)
        dense.add(nodes, [], {}, {})
        dense.finish(Path(tmp) / "dense", "flat", [n.id_ for n in nodes])
        ours_s = time.perf_counter() - started
    figures = {
        "chunks": len(texts),
        "raw_encode_chunks_per_s": round(len(texts) / raw_s, 1),
        "our_dense_index_chunks_per_s": round(len(texts) / ours_s, 1),
        "ratio": round(raw_s / ours_s, 3),
    }
    if full_build:
        started = time.perf_counter()
        build = build_index(corpus, settings)
        build_s = time.perf_counter() - started
        chunk_count = json.loads((build / "manifest.json").read_text())["chunks"]
        figures.update(
            {
                "full_build_s": round(build_s, 1),
                "full_build_abstracts_per_s": round(len(corpus) / build_s, 2),
                "full_build_chunks_per_s": round(chunk_count / build_s, 2),
            }
        )
    return figures


def bench_latency(settings, served: Served, rounds: int) -> dict:
    from rag.assistant import Assistant
    from rag.index.stores import load_index

    assistant = Assistant(load_index(settings), settings)
    queries = (QUERIES * (rounds // len(QUERIES) + 1))[:rounds]

    def timed(call, over: list[str] = queries) -> list[float]:
        call(over[0])
        out = []
        for q in over:
            started = time.perf_counter()
            call(q)
            out.append((time.perf_counter() - started) * 1000)
        return out

    with httpx.Client(base_url=served.url, timeout=60) as client:
        http_search = timed(lambda q: client.post("/search", json={"query": q}).raise_for_status())
        http_ask = timed(lambda q: client.post("/ask", json={"question": q}).raise_for_status())
        first_token = []
        for q in queries:
            started = time.perf_counter()
            with client.stream("POST", "/ask", json={"question": q, "stream": True}) as response:
                lines = response.iter_lines()
                for line in lines:
                    if line.startswith("event: token"):
                        first_token.append((time.perf_counter() - started) * 1000)
                        break
                for _ in lines:
                    pass
        mix = bench_dev_mix(client, 1 if rounds >= 100 else 0)
    local_search = timed(lambda q: assistant.retriever.search(q, 5))
    local_ask = timed(lambda q: assistant.ask(q))
    # The load's limit is the work of its search on one core: the load's query, embedded on one
    # thread as each of two workers on two cores embeds it (the service alone gives it every core).
    one_thread = settings.model_copy(update={"indexing": settings.indexing.model_copy(update={"question_threads": 1})})
    single = Assistant(load_index(one_thread), one_thread)
    limit_search = timed(lambda q: single.retriever.search(q, 5), [LOAD_QUERY] * rounds)
    return {
        "search_http": summary(http_search),
        "search_in_process": summary(local_search),
        "ask_http": summary(http_ask),
        "ask_in_process": summary(local_ask),
        "first_sse_token": summary(first_token),
        "load_query_in_process_one_thread_mean_ms": round(statistics.mean(limit_search), 2),
        "dev_mix": mix,
    }


def bench_dev_mix(client: httpx.Client, passes: int) -> dict:
    """The dev split's questions as the load, every kind (Chinese, follow-ups with their history,
    long paraphrases): /search of each question and /ask with its history, p50 / p95 by kind; then,
    apart from "all", dev's questions in fourteen other languages as the kind "other languages".
    `passes` 0 (a smoke run): the first question of each kind, once."""
    from rag.evaluation.runs import DATA_FILES

    questions = [json.loads(line) for line in DATA_FILES["dev"].read_text().splitlines() if line]
    questions += [
        {**json.loads(line), "type": OTHER_LANGUAGES}
        for line in DATA_FILES["dev_multilingual"].read_text().splitlines()
        if line
    ]
    if not passes:
        questions = list({q["type"]: q for q in reversed(questions)}.values())
    by_kind: dict[str, dict[str, list[float]]] = {}
    client.post("/search", json={"query": questions[0]["question"]}).raise_for_status()  # warm
    for q in questions * max(1, passes):
        times = by_kind.setdefault(q["type"], {"search": [], "ask": []})
        started = time.perf_counter()
        client.post("/search", json={"query": q["question"]}).raise_for_status()
        times["search"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        client.post("/ask", json={"question": q["question"], "history": q["history"]}).raise_for_status()
        times["ask"].append((time.perf_counter() - started) * 1000)
    dev = [times for kind, times in by_kind.items() if kind != OTHER_LANGUAGES]
    every = {"search": [t for k in dev for t in k["search"]], "ask": [t for k in dev for t in k["ask"]]}
    return {
        kind: {"questions": len(times["search"]), "search": summary(times["search"]), "ask": summary(times["ask"])}
        for kind, times in {"all": every, **dict(sorted(by_kind.items()))}.items()
    }


OTHER_LANGUAGES = "other languages"  # the dev mix's kind for eval/data/dev_multilingual.jsonl

LOAD_QUERY = "rotary embeddings for vision transformers"  # what the load sends, and its limit is timed on
WRK_SCRIPT = (
    f'wrk.method = "POST"\nwrk.body = \'{{"query": "{LOAD_QUERY}"}}\'\n'
    'wrk.headers["Content-Type"] = "application/json"\n'
)


def load_wrk(url: str, seconds: int, connections: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT)
    out = subprocess.run(
        [
            "wrk",
            "-t",
            "1",
            "-c",
            str(connections),
            "-d",
            f"{seconds}s",
            "--latency",
            "-s",
            script.name,
            f"{url}/search",
        ],
        capture_output=True,
        text=True,
    ).stdout
    os.unlink(script.name)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "tool": "wrk",
        "requests": requests,
        "req_per_s": round(requests / seconds, 1),
        "errors": errors + (int(non_2xx.group(1)) if non_2xx else 0),
    }


async def _python_load(url: str, seconds: int, connections: int) -> dict:
    """A bounded Python load generator for machines without wrk."""
    done = errors = 0
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def worker():
            nonlocal done, errors
            while time.perf_counter() < deadline:
                response = await client.post("/search", json={"query": LOAD_QUERY})
                done += 1
                errors += response.status_code != 200

        await asyncio.gather(*(worker() for _ in range(connections)))
    return {"tool": "python", "requests": done, "req_per_s": round(done / seconds, 1), "errors": errors}


def load_python(url: str, seconds: int, connections: int) -> dict:
    return asyncio.run(_python_load(url, seconds, connections))


def bench_load(env: dict, seconds: int, limit_rps: float) -> dict:
    results = {}
    for workers in (1, 2):
        served = Served(env, workers=workers)
        try:
            figures = load_wrk(served.url, seconds, 16) if shutil.which("wrk") else load_python(served.url, seconds, 16)
            figures["share_of_limit"] = round(figures["req_per_s"] / limit_rps, 3)
            figures["peak_rss_mb"] = round(served.peak_rss_mb(), 1)
            results[f"{workers}_worker"] = figures
        finally:
            served.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20 requests, 2 s of load, ingest ratio on 32 chunks"
    )
    parser.add_argument(
        "--index-dir", type=Path, help="serve this built index instead of building one (skips the full-build figure)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "service.json")
    args = parser.parse_args(argv)
    rounds, seconds = (20, 2) if args.quick else (200, 60)

    from rag.common.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="rag-bench-"))
    settings = Settings(index_dir=args.index_dir.resolve() if args.index_dir else work / "index")
    env = {"RAG_INDEX_DIR": str(settings.indexing.index_dir)}
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        report["ingest"] = bench_ingest(settings, 32 if args.quick else None, args.index_dir is None)
        served = Served(env)
        report["cold_start_s"] = round(served.start_s, 2)
        try:
            report["latency"] = bench_latency(settings, served, rounds)
            report["peak_rss_mb_after_latency"] = round(served.peak_rss_mb(), 1)
        finally:
            served.stop()
        limit = os.cpu_count() / (report["latency"]["load_query_in_process_one_thread_mean_ms"] / 1000)
        report["load_limit_req_per_s"] = round(limit, 1)
        report["load"] = bench_load(env, seconds, limit)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    i, lat = report["ingest"], report["latency"]
    rows = [
        (
            "ingest: dense index vs raw encode (chunks/s)",
            f"{i['our_dense_index_chunks_per_s']} vs {i['raw_encode_chunks_per_s']}",
            f"ratio {i['ratio']} (target >= 0.85)",
        ),
        (
            "full build (86 abstracts, both models)",
            f"{i.get('full_build_s', '-')} s",
            f"{i.get('full_build_abstracts_per_s', '-')} abstracts/s",
        ),
        (
            "/search HTTP p50 / p95",
            f"{lat['search_http']['p50_ms']} / {lat['search_http']['p95_ms']} ms",
            f"in-process {lat['search_in_process']['p50_ms']} / {lat['search_in_process']['p95_ms']} ms "
            "(target p50 <= 15)",
        ),
        (
            "/ask HTTP p50 / p95",
            f"{lat['ask_http']['p50_ms']} / {lat['ask_http']['p95_ms']} ms",
            f"in-process {lat['ask_in_process']['p50_ms']} / {lat['ask_in_process']['p95_ms']} ms (target p50 <= 40)",
        ),
        (
            "first SSE token p50 / p95",
            f"{lat['first_sse_token']['p50_ms']} / {lat['first_sse_token']['p95_ms']} ms",
            "target p50 <= 50",
        ),
        ("cold start to healthy", f"{report['cold_start_s']} s", "target <= 5"),
        ("peak RSS serving", f"{report['peak_rss_mb_after_latency']} MB", "target <= 1024"),
        (
            "load limit (cores / its search in process, one thread)",
            f"{report['load_limit_req_per_s']} req/s",
            "",
        ),
    ]
    for kind, figures in lat["dev_mix"].items():
        rows.append(
            (
                f"dev questions, {kind} ({figures['questions']}): /search, /ask p50 / p95",
                f"{figures['search']['p50_ms']} / {figures['search']['p95_ms']} ms",
                f"/ask {figures['ask']['p50_ms']} / {figures['ask']['p95_ms']} ms"
                + {
                    "all": " (targets: /search p50 <= 10, p95 <= 20)",
                    "chinese": " (target: /search p50 <= 12)",
                    OTHER_LANGUAGES: " (target: /search p50 within 1.5x of English)",
                }.get(kind, ""),
            )
        )
    for name, figures in report["load"].items():
        rows.append(
            (
                f"/search load, 16 connections, {name.replace('_', ' ')}",
                f"{figures['req_per_s']} req/s, {figures['errors']} errors",
                f"{figures['share_of_limit']} of the limit (target >= 0.7); {figures['tool']}",
            )
        )
    width = max(len(r[0]) for r in rows)
    print(f"{report['machine']}, {report['created']}")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:<28}  {note}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
