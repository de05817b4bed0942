"""The map's topic step alone (rag/index/topics.py `topics_of`) on synthetic paper vectors, in a
process of its own: `python -m bench.topics_scale --papers 100000`.

The vectors are clustered like papers: a mixture of `--centres` Gaussian centres in 384 d, each
paper its centre plus noise (cosine to its centre about 0.6), made unit. Prints the wall time,
the peak RSS (and the peak before the step: the vectors made), the topics found, the papers set
apart (no topic fits them) and the agreement of the others' topics with the centres (adjusted Rand
index; fewer topics than centres caps it below 1).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from rag.common.settings import Settings
from rag.index.topics import topics_of

DIMENSIONS = 384
NOISE = 0.07  # per dimension: a paper's cosine to its centre about 0.6


def clustered_vectors(papers: int, centres: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`papers` unit vectors around `centres` random directions, and each one's centre."""
    rng = np.random.default_rng(seed)
    middle = rng.standard_normal((centres, DIMENSIONS)).astype(np.float32)
    middle /= np.linalg.norm(middle, axis=1, keepdims=True)
    of = rng.integers(0, centres, papers)
    vectors = np.empty((papers, DIMENSIONS), np.float32)
    for start in range(0, papers, 10_000):  # a batch at a time, so that making them sets no peak of its own
        batch = middle[of[start : start + 10_000]]
        batch += NOISE * rng.standard_normal(batch.shape, dtype=np.float32)
        vectors[start : start + 10_000] = batch / np.linalg.norm(batch, axis=1, keepdims=True)
    return vectors, of


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--papers", type=int, default=100_000)
    parser.add_argument("--centres", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from scipy.cluster import hierarchy  # noqa: F401  (imported before timing, as a build has it)
    from sklearn.metrics import adjusted_rand_score

    vectors, centre = clustered_vectors(args.papers, args.centres, args.seed)
    before = peak_rss_mb()
    started = time.perf_counter()
    topics = topics_of(vectors, Settings())
    seconds = time.perf_counter() - started
    peak = peak_rss_mb()
    kept = topics >= 0
    sizes = np.bincount(topics[kept])
    print(
        f"{args.papers} papers, {args.centres} centres: the topic step {seconds:.3f} s, peak RSS {peak:.0f} MB "
        f"(before it: {before:.0f} MB, the vectors {vectors.nbytes / 2**20:.0f} MB); {len(sizes)} topics of "
        f"{sizes.min()} to {sizes.max()} papers, {np.count_nonzero(~kept)} set apart; adjusted Rand index of the "
        f"others' topics to the centres {adjusted_rand_score(centre[kept], topics[kept]):.2f}"
    )


if __name__ == "__main__":
    main()
