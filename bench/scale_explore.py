"""The map and the similar papers at a corpus size a laptop can build: `python -m bench.scale --explore --papers N`.

The synthetic papers of bench/scale_search.py (seed sentences with perturbed real vectors, no
model run) are built in a process of its own: its seconds and peak RSS, and the seconds of its
map step (the manifest's `map_seconds`). The map step then runs again alone, in a process of its
own, on the build's paper vectors: its seconds and peak RSS, and its RSS before the fit (the
papers and their vectors; the peak also counts the sentence vectors read to make them). The
build is served as `rag serve` serves it: GET /map, the first request (which encodes and
compresses it) and the p50 of the next ones, its size gzip-compressed and not; GET
/papers/{id}/similar?k=5 p50 / p95 over random papers. The same for the 86 seed papers, for
comparison.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import httpx
import numpy as np

from rag.common.settings import Settings

MAP_REQUESTS = 20


def _map_step(index_dir: str, seeds_dir: str, out: str) -> None:
    """In a process of its own (spawned): the map fitted on a build's papers, as a build fits it."""
    import resource

    from rag.index.corpus import Paper
    from rag.index.stores.faiss.folders import current_build
    from rag.index.stores.faiss.sentences import SENTENCES, SentenceTable
    from rag.index.topics import fit_map, paper_vectors

    settings = Settings(index_dir=index_dir, seeds_dir=seeds_dir, multilingual=False)
    build = current_build(settings)
    papers = [Paper(**p) for p in json.loads((build / "papers.json").read_text())["papers"]]
    counts = SentenceTable.load(build / SENTENCES, papers).counts(papers)
    sentences = np.load(build / "sentences.npy", mmap_mode="r")
    vectors, start = [], 0
    for first in range(0, len(papers), settings.store.build_batch):  # as the build has them: a batch at a time
        batch = counts[first : first + settings.store.build_batch]
        vectors.append(paper_vectors(sentences[start : start + sum(batch)], batch))
        start += sum(batch)
    del sentences
    matrix = np.concatenate(vectors)
    # What this process holds now (the papers and their vectors): the sentence vectors it read are
    # unmapped, so the peak so far (ru_maxrss) would count them.
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    before = int(status["VmRSS"].split()[0]) / 1024
    started = time.perf_counter()
    fitted = fit_map(papers, matrix, settings)
    Path(out).write_text(
        json.dumps(
            {
                "map_s": time.perf_counter() - started,
                "map_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "map_rss_before_fit_mb": before,
                "topics": len(fitted.topics),
            }
        )
    )


def measure(url: str, paper_ids: list[str], rounds: int) -> dict:
    """/map first and warm (gzip), its sizes; /similar p50 and p95 over `rounds` random papers."""
    out: dict = {}
    with httpx.Client(timeout=120) as client:
        times = []
        for _ in range(MAP_REQUESTS + 1):
            started = time.perf_counter()
            response = client.get(f"{url}/map")
            response.raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
        out["map_first_ms"], out["map_p50_ms"] = times[0], statistics.median(times[1:])
        out["map_gzip_bytes"] = response.num_bytes_downloaded
        out["map_json_bytes"] = len(response.content)
        rng = random.Random(2026)
        times = []
        for i in range(rounds + 10):
            started = time.perf_counter()
            client.get(f"{url}/papers/{rng.choice(paper_ids)}/similar", params={"k": 5}).raise_for_status()
            if i >= 10:
                times.append((time.perf_counter() - started) * 1000)
        times.sort()
        out["similar_p50_ms"], out["similar_p95_ms"] = statistics.median(times), times[int(len(times) * 0.95) - 1]
    return out


def run(papers: int, rounds: int, seed_index: Path, search: bool = False) -> dict:
    """`search`: also /search p50 and p95 on the same servers (bench/scale_search.py's `faiss` figures)."""
    import shutil
    import tempfile

    from bench import scale_search
    from bench.scale_search import build, du_mb, spawned
    from bench.serving import Served, env_of

    questions = scale_search.english_dev_questions() if search else []

    work = Path(tempfile.mkdtemp(prefix="scale-explore-"))
    results: dict = {"papers": papers, "rounds": rounds}
    try:
        for n in (0, papers):
            label = str(n or 86)
            settings, figures = build(work, n, seed_index)
            from rag.index.stores.faiss.folders import current_build, read_manifest

            manifest = read_manifest(current_build(settings), verify=False)
            step = spawned(
                _map_step,
                (str(settings.indexing.index_dir), str(settings.indexing.seeds_dir)),
                work / f"map-{label}.json",
                "the map",
            )
            row = results[label] = {
                **figures,
                **step,
                "build_map_s": manifest["map_seconds"],
                "map_file_mb": (current_build(settings) / "map.json").stat().st_size / 2**20,
                "index_mb": du_mb(Path(settings.indexing.index_dir) / "builds"),
            }
            ids = [p["paper_id"] for p in json.loads((current_build(settings) / "papers.json").read_text())["papers"]]
            served = Served(env_of(settings, work / "models"), work / f"serve-{label}.log")
            try:
                row.update(measure(served.url, ids, rounds))
                if search:
                    row["faiss"] = scale_search.measure(served, questions, rounds)
            finally:
                served.stop()
            print(
                f"{label:>7} papers: build {row['build_s']:.0f} s (peak RSS {row['build_peak_rss_mb']:.0f} MB), "
                f"its map step {row['build_map_s']:.1f} s; the map step alone {row['map_s']:.1f} s, peak RSS "
                f"{row['map_peak_rss_mb']:.0f} MB ({row['map_rss_before_fit_mb']:.0f} MB before the fit), "
                f"{row['topics']} topics"
            )
            print(
                f"{label:>7} papers: GET /map first {row['map_first_ms']:.0f} ms, then p50 {row['map_p50_ms']:.1f} ms; "
                f"{row['map_gzip_bytes'] / 1024:.0f} KB gzip ({row['map_json_bytes'] / 1024:.0f} KB JSON); "
                f"GET /similar p50 {row['similar_p50_ms']:.1f} ms, p95 {row['similar_p95_ms']:.1f} ms"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results
