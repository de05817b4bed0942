"""Scale figures: build throughput, Ray scaling, FAISS vs Milvus, adds across replicas.

* build throughput: a first build of the seeds (`build_index`, both models, model loading and
  the ONNX export included), then `rag index` again in its own process (the export cached in
  the index folder) against the encoders alone on the same texts, alternating, medians;
* Ray: `rag index` of a synthetic corpus (English model) in one process, then `--ray` with 1
  and 2 actors on a local Ray; throughput of the embedding stage and scaling efficiency. Ray
  binds the interface address, so this part runs in `unshare -n` (loopback only; root);
* /search p50 over HTTP, FAISS vs Milvus Lite (`milvus-lite server` on 127.0.0.1), at the 86
  seed papers and at 20,000 synthetic abstracts;
* an add through one replica, seen by another (both on the Milvus server): seconds;
* the evaluation on dev and test with each store.

The synthetic abstracts are 5-9 sentences drawn from the seed abstracts (random.Random(2026)).
Their vectors at 20,000 come from the seed sentences' (a chunk's vector is the normalised mean
of its sentences'): real vectors of this model for the distribution that matters to search
latency, without an hour of embedding. The Ray figures embed for real.

    .venv/bin/python -m bench.scale            # about 10 minutes on 2 cores

Prints a table and writes bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.corpora import synthetic_abstracts, write_seed_file
from bench.serving import MilvusServer, Served, env_of, milvus_from
from rag.common.settings import Settings
from rag.index.chunking import split_sentences
from rag.index.corpus import build_corpus, load_corpus
from rag.index.embedding import QUERY_ENCODER
from rag.index.stores.base import KnownVectors
from rag.index.stores.faiss import build_index, load_index

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "seeds"


class SeedSentenceVectors:
    """A build's `remote`: vectors from the seed index's sentence vectors instead of a model."""

    def __init__(self, seed_index):
        self.by_text = dict(zip((s.text for s in seed_index.sentences), seed_index.sentence_vectors, strict=True))

    def vector(self, text: str) -> np.ndarray:
        if text in self.by_text:
            return self.by_text[text]
        parts = [v for t, v in self.by_text.items() if t in text] or list(self.by_text.values())[:1]
        mean = np.mean(parts, axis=0)
        return mean / np.linalg.norm(mean)

    def vectors(self, nodes, sentences, settings, known, encoder=None) -> KnownVectors:
        for node in nodes:
            known.chunks.setdefault(node.id_, self._chunk(node.text))
        for sentence in sentences:
            known.sentences.setdefault(sentence, self.vector(sentence.text))
        return known

    def _chunk(self, text: str) -> np.ndarray:
        inside = [v for t, v in self.by_text.items() if t in text]
        if not inside:
            return self.vector(text)
        mean = np.mean(inside, axis=0)
        return mean / np.linalg.norm(mean)


def build_vs_encoders(work: Path, rounds: int) -> dict:
    """A first build (the ONNX export included), then `rounds` times a rebuild as a user runs it
    (`rag index` in its own process, imports included, the export taken from the folder's model
    cache) alternating with the encoders alone on the same texts: medians, as this machine's
    timings vary by 10 % from run to run."""
    from llama_index.core.schema import MetadataMode

    from rag.index.chunking import chunk_papers
    from rag.index.embedding import document_embedder, load_embedder, tokenizer_of
    from rag.index.multilingual import load_multilingual_embedder

    settings = Settings(index_dir=work / "index", seeds_dir=SEEDS)
    corpus = load_corpus(SEEDS)
    started = time.perf_counter()
    build = build_index(corpus, settings)
    build_s = time.perf_counter() - started

    torch_model = load_embedder(settings.indexing.embedding_model)
    nodes = chunk_papers(
        corpus.papers, tokenizer_of(torch_model), settings.indexing.chunk_size, settings.indexing.chunk_overlap
    )
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    texts += [s.text for p in corpus.papers for s in split_sentences(p)]
    onnx = document_embedder(build / QUERY_ENCODER, settings.indexing.embedding_model, None)
    multilingual = load_multilingual_embedder()

    def seconds(model) -> float:
        model.get_text_embedding_batch(texts[:16])
        started = time.perf_counter()
        model.get_text_embedding_batch(texts)
        return time.perf_counter() - started

    def rebuild() -> float:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "server.cli", "index", "--quiet"],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "RAG_INDEX_DIR": str(settings.indexing.index_dir), "RAG_SEEDS_DIR": str(SEEDS)},
        )
        return time.perf_counter() - started

    runs = [(rebuild(), seconds(onnx), seconds(multilingual)) for _ in range(rounds)]
    rebuild_s, onnx_s, multilingual_s = (statistics.median(column) for column in zip(*runs, strict=True))
    alone = statistics.median(o + m for _, o, m in runs)
    return {
        "papers": len(corpus),
        "texts": len(texts),
        "build_s": build_s,
        "rebuild_s": rebuild_s,
        "rebuilds_s": [r for r, _, _ in runs],
        "encoders_alone_s": alone,
        "ratio": alone / build_s,
        "rebuild_ratio": alone / rebuild_s,
        "english_onnx_s": onnx_s,
        "english_torch_s": seconds(torch_model),
        "multilingual_s": multilingual_s,
        "papers_per_s": len(corpus) / rebuild_s,
    }


RAY_RUN = """
set -e
ip link set lo up
rag() {{ "{python}" -m server.cli "$@"; }}
RAG_INDEX_DIR={work}/single rag index --quiet
RAG_INDEX_DIR={work}/ray1 rag index --quiet --ray --ray-workers 1
RAG_INDEX_DIR={work}/ray2 rag index --quiet --ray --ray-workers 2
"""


def ray_scaling(work: Path, papers: int) -> dict:
    """Single process vs Ray with 1 and 2 actors, English model, inside `unshare -n`."""
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        return {"skipped": "needs `unshare -n` (root) to keep Ray on loopback"}
    seeds = work / "seeds"
    write_seed_file(seeds, synthetic_abstracts(papers, seed=7))
    env = {
        **os.environ,
        "RAG_SEEDS_DIR": str(seeds),
        "RAG_MULTILINGUAL": "false",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["unshare", "-n", "bash", "-c", RAY_RUN.format(python=sys.executable, work=work)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr[-3000:])
    builds = [float(m) for m in re.findall(r"chunks in ([\d.]+) s", done.stdout)]
    embedded = [
        (int(t), float(s))
        for t, s in re.findall(r"embedded (\d+) texts on \d+ Ray actors over \d+ nodes in ([\d.]+) s", done.stdout)
    ]
    (texts, one_s), (_, two_s) = embedded
    return {
        "papers": papers,
        "texts": texts,
        "single_process_build_s": builds[0],
        "ray1_build_s": builds[1],
        "ray2_build_s": builds[2],
        "ray1_embed_s": one_s,
        "ray2_embed_s": two_s,
        "ray1_texts_per_s": texts / one_s,
        "ray2_texts_per_s": texts / two_s,
        "speedup_2_vs_1": one_s / two_s,
    }


def search_latency(work: Path, milvus: MilvusServer, rounds: int, synthetic: int) -> dict:
    out = {}
    seed_index = ROOT / "index"
    big = work / "big"
    settings = Settings(index_dir=big / "index", seeds_dir=big / "seeds", multilingual=False)
    write_seed_file(big / "seeds", synthetic_abstracts(synthetic))
    corpus = load_corpus(big / "seeds")
    started = time.perf_counter()
    build_index(
        corpus, settings, remote=SeedSentenceVectors(load_index(Settings(index_dir=seed_index, seeds_dir=SEEDS)))
    )
    out["synthetic_build_s"] = time.perf_counter() - started
    for label, index_dir, seeds, multilingual in (
        ("86", seed_index, SEEDS, True),
        (str(synthetic), big / "index", big / "seeds", False),
    ):
        faiss_settings = Settings(index_dir=index_dir, seeds_dir=seeds, multilingual=multilingual)
        started = time.perf_counter()
        milvus_settings = milvus_from(faiss_settings, milvus.uri, f"bench{label}")
        out[f"milvus_write_{label}_s"] = time.perf_counter() - started
        for store, settings_ in (("faiss", faiss_settings), ("milvus", milvus_settings)):
            server = Served(env_of(settings_, work / "models"), work / f"{store}-{label}.log")
            try:
                out[f"{store}_{label}_search_ms"] = server.search_p50(rounds)
            finally:
                server.stop()
    return out


def add_visible(work: Path, milvus: MilvusServer, adds: int) -> dict:
    settings = Settings(index_dir=ROOT / "index", seeds_dir=SEEDS).model_copy(
        update={"vector_store": "milvus", "milvus_uri": milvus.uri, "milvus_collection": "bench86"}
    )
    env = env_of(settings, work / "models")
    a, b = Served(env, work / "a.log"), Served(env, work / "b.log")
    seconds = []
    try:
        for i, text in enumerate(synthetic_abstracts(adds, seed=99)):
            paper_id = build_corpus([("x.txt", [text])]).papers[0].paper_id
            posted = httpx.post(
                f"{a.url}/papers", json={"filename": f"add{i}.txt", "content": f"New\n\n{text}\n"}, timeout=120
            )
            posted.raise_for_status()
            started = time.perf_counter()
            while httpx.get(f"{b.url}/papers/{paper_id}").status_code != 200:
                if time.perf_counter() - started > 30:
                    raise RuntimeError("replica B never saw the add")
                time.sleep(0.02)
            seconds.append(time.perf_counter() - started)
    finally:
        a.stop()
        b.stop()
    return {"adds": adds, "visible_s": seconds, "visible_median_s": statistics.median(seconds)}


def evaluation(work: Path, milvus: MilvusServer) -> dict:
    """`rag eval` (dev and test, hybrid) on the seed index and on its copy in Milvus."""
    out = {}
    for store in ("faiss", "milvus"):
        env = {**os.environ, "RAG_INDEX_DIR": str(ROOT / "index"), "RAG_SEEDS_DIR": str(SEEDS)}
        if store == "milvus":
            env.update(
                RAG_VECTOR_STORE="milvus",
                RAG_MILVUS_URI=milvus.uri,
                RAG_MILVUS_COLLECTION="bench86",
                RAG_INDEX_DIR=str(work / "models"),
            )
        with tempfile.TemporaryDirectory() as reports:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "server.cli",
                    "eval",
                    "--split",
                    "dev,test",
                    "--systems",
                    "hybrid",
                    "--out",
                    reports,
                ],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )
            (report,) = Path(reports).glob("*/report.json")
            data = json.loads(report.read_text())
        out[store] = {
            split: {
                k: v
                for k, v in figures["systems"]["hybrid"]["overall"].items()
                if isinstance(v, (int, float)) and "_ms_" not in k
            }
            for split, figures in data["splits"].items()
        }
    worst = max(
        abs(out["faiss"][split][k] - out["milvus"][split][k])
        for split in out["faiss"]
        for k in out["faiss"][split]
        if k in out["milvus"][split]
    )
    return {"largest_difference": worst, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic", type=int, default=20_000, help="abstracts for the search-latency corpus")
    parser.add_argument("--ray-papers", type=int, default=300, help="synthetic abstracts the Ray runs embed")
    parser.add_argument("--rounds", type=int, default=200, help="/search requests per server")
    parser.add_argument("--build-rounds", type=int, default=3, help="rebuilds and encoder runs (medians)")
    parser.add_argument(
        "--search", action="store_true", help="only /search at 86 and --papers synthetic papers (bench/scale_search.py)"
    )
    parser.add_argument(
        "--explore",
        action="store_true",
        help="only the map and similar papers at --papers (bench/scale_explore.py); with --search, both on the "
        "same builds and servers (FAISS only)",
    )
    parser.add_argument("--papers", type=int, default=100_000, help="synthetic papers for --search and --explore")
    parser.add_argument("--no-milvus", action="store_true", help="--search: FAISS only")
    parser.add_argument(
        "--seed-index", type=Path, default=ROOT / "index", help="--search, --explore: an index of the seeds"
    )
    parser.add_argument(
        "--out", type=Path, help="--search, --explore: results file (default bench/results/scale-<what>-N.json)"
    )
    args = parser.parse_args()
    if args.explore:
        from bench import scale_explore, scale_search

        results = scale_explore.run(args.papers, args.rounds, args.seed_index, search=args.search)
        out = args.out or ROOT / "bench" / "results" / f"scale-explore-{args.papers}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
        if args.search:
            scale_search.report(results)
        return
    if args.search:
        from bench import scale_search

        results = scale_search.run(args.papers, args.rounds, not args.no_milvus, args.seed_index)
        out = args.out or ROOT / "bench" / "results" / f"scale-search-{args.papers}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
        scale_search.report(results)
        return
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    results: dict = {}
    milvus = MilvusServer(work / "milvus")
    try:
        results["build"] = build_vs_encoders(work / "build", args.build_rounds)
        results["ray"] = ray_scaling(work / "ray", args.ray_papers)
        results["search"] = search_latency(work, milvus, args.rounds, args.synthetic)
        results["evaluation"] = evaluation(work, milvus)  # before the adds below change the collection
        results["add_visible"] = add_visible(work, milvus, 5)
    finally:
        milvus.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.synthetic)


def report(results: dict, synthetic: int) -> None:
    b, r, s = results["build"], results["ray"], results["search"]
    print(f"first build, {b['papers']} papers ({b['texts']} texts, both models, ONNX export)  {b['build_s']:6.1f} s")
    print(
        f"  `rag index` again (own process, export cached), median  {b['rebuild_s']:6.1f} s  "
        f"({b['papers_per_s']:.2f} papers/s; {', '.join(f'{x:.1f}' for x in b['rebuilds_s'])})"
    )
    print(
        f"  the encoders alone on the same texts, median            {b['encoders_alone_s']:6.1f} s  ratio "
        f"{b['rebuild_ratio']:.2f} (rebuild), {b['ratio']:.2f} (first build); English ONNX "
        f"{b['english_onnx_s']:.1f} s, torch {b['english_torch_s']:.1f} s; multilingual-e5 {b['multilingual_s']:.1f} s"
    )
    if "skipped" in r:
        print(f"Ray: skipped ({r['skipped']})")
    else:
        print(
            f"Ray, {r['papers']} synthetic papers ({r['texts']} texts, English model): one process "
            f"{r['single_process_build_s']:.1f} s; Ray embedding 1 actor {r['ray1_embed_s']:.1f} s "
            f"({r['ray1_texts_per_s']:.0f} texts/s), 2 actors {r['ray2_embed_s']:.1f} s "
            f"({r['ray2_texts_per_s']:.0f} texts/s): {r['speedup_2_vs_1']:.2f}x"
        )
    for label in ("86", str(synthetic)):
        f50, f95 = s[f"faiss_{label}_search_ms"]
        m50, m95 = s[f"milvus_{label}_search_ms"]
        print(
            f"/search over HTTP at {label:>6} papers: FAISS p50 {f50:.1f} ms (p95 {f95:.1f}), "
            f"Milvus Lite p50 {m50:.1f} ms (p95 {m95:.1f})"
        )
    a = results["add_visible"]
    print(
        f"add through replica A, visible on replica B: median {a['visible_median_s']:.2f} s "
        f"({', '.join(f'{x:.2f}' for x in a['visible_s'])})"
    )
    print(
        "evaluation, Milvus vs FAISS: largest difference of any figure "
        f"{results['evaluation']['largest_difference']:.3f}"
    )
    out = ROOT / "bench" / "results" / "scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"-> {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
