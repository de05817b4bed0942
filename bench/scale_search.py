"""/search at a corpus size a laptop can build: `python -m bench.scale --papers N --search`.

N synthetic papers are made of the seed abstracts' sentences (5-9 each, random.Random(2026)),
every paper name in them suffixed with the paper's number so that names stay unique as in a
real corpus (a vocabulary that grows with N). Their vectors are the seed sentences' real
vectors plus Gaussian noise (cosine about 0.9 to the original), and a chunk's is the normalised
mean of its sentences': no model runs, so 100,000 papers take minutes. The build runs in a
process of its own (its peak RSS is reported); the 86 seed papers are built the same way from
their own unperturbed vectors, English model only, so both servers run the same code on the
same questions (the dev split's English ones, history-free).

Each corpus is served as `rag serve` serves it (uvicorn on 127.0.0.1) with FAISS, then from a
Milvus Lite server. Printed: p50 / p95 of /search, replica start (process to /health 200),
RSS serving, index size; the last line `search p50: 86 papers X ms, N papers Y ms, ratio R`.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import re
import resource
import time
from pathlib import Path

import numpy as np

from rag.common.settings import Settings
from rag.evaluation.runs import SPLITS
from rag.index.chunking import split_sentences
from rag.index.corpus import load_corpus, paper_id_for
from rag.index.stores.base import KnownVectors
from rag.query.language import ENGLISH, language_of

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "seeds"
NOISE = 0.025  # per dimension: |noise| ~ 0.49 against unit vectors, cosine ~ 0.9 to the original


def seed_sentences(seed_index: Path) -> tuple[list[str], np.ndarray]:
    """The seed abstracts' sentences and their English vectors, read from the files of an index
    of the seeds (no model loaded: the build's peak RSS is the build's own)."""
    from rag.index.corpus import Paper
    from rag.index.stores.faiss.folders import current_build
    from rag.index.stores.faiss.sentences import SENTENCES, SentenceTable

    build = current_build(Settings(index_dir=seed_index, seeds_dir=SEEDS))
    papers = [Paper(**p) for p in json.loads((build / "papers.json").read_text())["papers"]]
    texts = [s.text for s in SentenceTable.load(build / SENTENCES, papers).sentences(papers)]
    return texts, np.load(build / "sentences.npy")


def synthetic_papers(n: int, pool: list[str], seed: int = 2026) -> list[tuple[str, list[int]]]:
    """N abstracts (text, the pool sentences each is made of), every seed paper name in them
    numbered ("ImpQuant" -> "ImpQuant17") so that a name picks one paper."""
    names = sorted({p.name for p in load_corpus(SEEDS).papers if not p.name.endswith("…")}, key=len, reverse=True)
    named = re.compile("|".join(rf"(?<!\w){re.escape(name)}(?!\w)" for name in names))
    rng = random.Random(seed)
    papers = []
    for i in range(n):
        rows = rng.sample(range(len(pool)), rng.randint(5, 9))
        papers.append((named.sub(lambda m, i=i: f"{m.group(0)}{i}", " ".join(pool[r] for r in rows)), rows))
    return papers


class PerturbedVectors:
    """A build's `remote`: each sentence's vector is its pool sentence's plus noise; a chunk's the
    normalised mean of the sentences it overlaps. No model runs."""

    def __init__(self, papers: list[tuple[str, list[int]]], vectors: np.ndarray, noise: float, seed: int = 2026):
        self.rows = {paper_id_for(text): rows for text, rows in papers}
        self.pool = vectors
        self.noise = noise
        self.seed = seed

    def _paper(self, paper_id: str, count: int) -> np.ndarray:
        base = self.pool[self.rows[paper_id]]
        # A split that differs from the pool's (rare) repeats the paper's last sentence vector.
        base = base[np.minimum(np.arange(count), len(base) - 1)]
        rng = np.random.default_rng([self.seed, int(paper_id, 16)])
        out = base + rng.standard_normal(base.shape, dtype=np.float32) * self.noise
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def vectors(self, nodes, sentences, settings, known, encoder=None) -> KnownVectors:
        by_paper: dict[str, list] = {}
        for sentence in sentences:
            by_paper.setdefault(sentence.paper_id, []).append(sentence)
        matrices = {}
        for pid, own in by_paper.items():
            matrices[pid] = self._paper(pid, len(own))
            known.sentences.update(zip(own, matrices[pid], strict=True))
        for node in nodes:
            pid, (start, end) = node.metadata["paper_id"], node.metadata["span"]
            own = by_paper[pid]
            inside = [j for j, s in enumerate(own) if s.span[0] < end and s.span[1] > start] or [0]
            mean = matrices[pid][inside].mean(axis=0)
            known.chunks[node.id_] = mean / np.linalg.norm(mean)
        return known


def _build(index_dir: str, seeds_dir: str, papers: int, seed_index: str, out: str) -> None:
    """In a process of its own (spawned): build, then write the seconds and this process's peak RSS."""
    from rag.index.stores.faiss import build_index

    texts, vectors = seed_sentences(Path(seed_index))
    settings = Settings(index_dir=index_dir, seeds_dir=seeds_dir, multilingual=False)
    if papers:
        made = synthetic_papers(papers, texts)
        from bench.corpora import write_seed_file

        write_seed_file(Path(seeds_dir), [text for text, _ in made])
        remote = PerturbedVectors(made, vectors, NOISE)
    else:  # the seeds, each sentence its own vector
        corpus = load_corpus(SEEDS)
        row = {text: i for i, text in enumerate(texts)}
        made = [(p.text, [row[s.text] for s in split_sentences(p)]) for p in corpus.papers]
        Path(seeds_dir).mkdir(parents=True, exist_ok=True)
        for f in SEEDS.glob("*.txt"):
            (Path(seeds_dir) / f.name).write_bytes(f.read_bytes())
        remote = PerturbedVectors(made, vectors, 0.0)
    started = time.perf_counter()
    build_index(load_corpus(Path(seeds_dir)), settings, remote=remote)
    _report_to_parent(out, "build", started)


def _write_milvus(index_dir: str, seeds_dir: str, uri: str, collection: str, out: str) -> None:
    """In a process of its own: the FAISS build copied into Milvus, then the seconds and peak RSS
    (the FAISS build it reads included)."""
    from bench.serving import milvus_from

    started = time.perf_counter()
    milvus_from(Settings(index_dir=index_dir, seeds_dir=seeds_dir, multilingual=False), uri, collection)
    _report_to_parent(out, "milvus_write", started)


def _report_to_parent(out: str, name: str, started: float) -> None:
    """`<name>_s` since `started` and `<name>_peak_rss_mb` (this process's), to `out`."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps({f"{name}_s": time.perf_counter() - started, f"{name}_peak_rss_mb": peak}))


def spawned(target, args: tuple, out: Path, what: str) -> dict:
    """`target(*args, out)` in a spawned process (its own peak RSS); what it wrote to `out`."""
    process = multiprocessing.get_context("spawn").Process(target=target, args=(*args, str(out)))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"{what} failed (exit {process.exitcode})")
    return json.loads(out.read_text())


def build(work: Path, papers: int, seed_index: Path) -> tuple[Settings, dict]:
    """`papers` synthetic papers (0: the seeds) built in a spawned process."""
    label = str(papers or 86)
    index_dir, seeds_dir = work / label / "index", work / label / "seeds"
    figures = spawned(
        _build,
        (str(index_dir), str(seeds_dir), papers, str(seed_index)),
        work / f"build-{label}.json",
        f"the build of {label} papers",
    )
    return Settings(index_dir=index_dir, seeds_dir=seeds_dir, multilingual=False), figures


def english_dev_questions() -> list[str]:
    rows = [json.loads(line) for line in SPLITS["dev"].read_text().splitlines() if line.strip()]
    return [r["question"] for r in rows if not r.get("history") and language_of(r["question"]) == ENGLISH]


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def proc_status(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


def measure(served, questions: list[str], rounds: int) -> dict:
    p50, p95 = served.search_p50(rounds, questions, warmup=20, timeout=60)
    return {
        "p50_ms": p50,
        "p95_ms": p95,
        "start_s": served.start_s,
        **{f"{k}_mb": v for k, v in proc_status(served.proc.pid).items()},
    }


def run(papers: int, rounds: int, milvus_too: bool, seed_index: Path = ROOT / "index") -> dict:
    import shutil
    import tempfile

    from bench.serving import MilvusServer, Served, env_of

    work = Path(tempfile.mkdtemp(prefix="scale-search-"))
    questions = english_dev_questions()
    results: dict = {"papers": papers, "questions": len(questions), "rounds": rounds}
    try:
        built = {}
        for n in (0, papers):
            label = str(n or 86)
            settings, figures = build(work, n, seed_index)
            built[label] = settings
            results[label] = {**figures, "index_mb": du_mb(Path(settings.indexing.index_dir) / "builds")}
            print(f"built {label} papers: {figures['build_s']:.0f} s, peak RSS {figures['build_peak_rss_mb']:.0f} MB")
        milvus = MilvusServer(work / "milvus") if milvus_too else None
        try:
            for store in ("faiss", "milvus") if milvus is not None else ("faiss",):
                for label, settings in built.items():
                    served_settings = settings
                    if store == "milvus":
                        collection = f"scale{label}"
                        args = (
                            str(settings.indexing.index_dir),
                            str(settings.indexing.seeds_dir),
                            milvus.uri,
                            collection,
                        )
                        written = spawned(_write_milvus, args, work / f"milvus-{label}.json", "the Milvus write")
                        results[label].update(written, milvus_mb=du_mb(work / "milvus"))
                        served_settings = settings.model_copy(
                            update={"vector_store": "milvus", "milvus_uri": milvus.uri, "milvus_collection": collection}
                        )
                    served = Served(env_of(served_settings, work / "models"), work / f"{store}-{label}.log")
                    try:
                        results[label][store] = measure(served, questions, rounds)
                    finally:
                        served.stop()
                    f = results[label][store]
                    print(
                        f"{store:6} {label:>7} papers: /search p50 {f['p50_ms']:.1f} ms, p95 {f['p95_ms']:.1f} ms; "
                        f"start {f['start_s']:.1f} s; RSS {f['VmRSS_mb']:.0f} MB (peak {f['VmHWM_mb']:.0f})"
                    )
        finally:
            if milvus is not None:
                milvus.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def report(results: dict) -> None:
    n = str(results["papers"])
    small, big = results["86"], results[n]
    for label, row in (("86", small), (n, big)):
        print(
            f"{label:>7} papers: index {row['index_mb']:.0f} MB on disk; build {row['build_s']:.0f} s, "
            f"peak RSS {row['build_peak_rss_mb']:.0f} MB (precomputed vectors)"
            + (
                f"; Milvus Lite write {row['milvus_write_s']:.0f} s, peak RSS {row['milvus_write_peak_rss_mb']:.0f} MB"
                if "milvus_write_s" in row
                else ""
            )
        )
    for store in ("milvus", "faiss"):
        if store in big:
            a, b = small[store]["p50_ms"], big[store]["p50_ms"]
            p95 = f"p95 {small[store]['p95_ms']:.1f} / {big[store]['p95_ms']:.1f} ms"
            line = f"search p50: 86 papers {a:.1f} ms, {n} papers {b:.1f} ms, ratio {b / a:.2f}"
            print(f"{store}: {p95}; start {big[store]['start_s']:.1f} s; RSS {big[store]['VmRSS_mb']:.0f} MB")
            print(line if store == "faiss" else f"({store}) {line}")
