"""Synthetic corpora for the benchmarks: abstracts of 5-9 sentences drawn from the seed abstracts,
so that their length, vocabulary and embedding cost are the seeds' (random.Random(seed))."""

from __future__ import annotations

import random
from pathlib import Path

from rag.index.chunking import split_sentences
from rag.index.corpus import load_corpus

SEEDS = Path(__file__).resolve().parent.parent / "seeds"


def synthetic_abstracts(n: int, seed: int = 2026) -> list[str]:
    pool = [s.text for p in load_corpus(SEEDS).papers for s in split_sentences(p)]
    rng = random.Random(seed)
    return [" ".join(rng.sample(pool, rng.randint(5, 9))) for _ in range(n)]


def write_seed_file(directory: Path, abstracts: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "synthetic.txt"
    path.write_text("Synthetic abstracts\n\n" + "\n\n".join(abstracts) + "\n")
    return path
