"""Fit the evidence weights (rag/evidence.py) on the dev split only, and say how they do.

Examples: the first `answer_sources` retrieved papers of every dev question, labelled 1 when the
paper is gold; plus every one-paper dev question asked again with its paper hidden (leave one
out), where no retrieved paper answers. One logistic regression for English questions and one
for questions in other scripts (the same features, multilingual-e5 cosines), fitted on
standardised features and checked by 10-fold cross-validation grouped by question. The
multilingual set is small and its cosines vary little, so its probabilities are less confident.
`answer_above` is the cross-validated probability under which 3 % of the answerable dev
questions would be refused. A third regression, on the dev questions that ask for several
papers, says which retrieved papers belong in their answer (`SeveralWeights`, cited above 0.5).
Then `high_above` and `missing_below`, which split answers into high and low confidence: the
pair under which at most 5 % of the written off-corpus questions of the tuning splits get a
high answer and the most answerable ones a high answer citing a gold paper (for the weights
already in the settings). Prints the settings to put in rag/config.py.

    .venv/bin/python eval/calibrate.py [SPLITS]   # tuning splits for the confidence, default dev
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rag.assistant import Assistant  # noqa: E402
from rag.config import Settings, SeveralWeights  # noqa: E402
from rag.evaluation import SPLITS, leave_one_out, load_questions  # noqa: E402
from rag.evidence import FEATURES, SEVERAL_FEATURES, several_features  # noqa: E402
from rag.stores import load_index  # noqa: E402
from rag.text import asks_for_several  # noqa: E402

FALSE_ABSTENTION = 0.03  # the ceiling on abstaining on an answerable question
OFF_CORPUS_HIGH = 0.05  # the ceiling on answering a written off-corpus question with high confidence
HIGH_ABOVE = np.round(np.arange(0.1, 0.96, 0.05), 2)  # the grid searched for high_above ...
MISSING_BELOW = np.round(np.arange(0.1, 0.61, 0.02), 2)  # ... and for missing_below


def examples(settings: Settings):
    index = load_index(settings)
    dev = load_questions(SPLITS["dev"], index.corpus)
    seeing = Assistant(index, settings)
    rows = []
    for q in dev + leave_one_out(dev):
        assistant = Assistant(index, settings, seeing.generator, exclude=q["exclude"]) if q.get("exclude") else seeing
        retrieval = assistant.retrieve(*assistant.condense(q["question"], q["history"]))
        assessed = assistant.assess(retrieval, q["question"])
        several = asks_for_several(retrieval.query) and bool(q["gold"]) and not q.get("exclude")
        for hit, evidence, sx in zip(retrieval.hits, assessed, several_features(assessed), strict=True):
            rows.append(
                {
                    "question": q["id"].removesuffix("-loo"),
                    "answerable": bool(q["gold"]),
                    "loo": bool(q.get("exclude")),
                    "written_off_corpus": q["type"] == "unanswerable" and not q.get("exclude"),
                    "multilingual": retrieval.multilingual,
                    "named": evidence.named,
                    "gold": hit.paper.paper_id in q["gold"],
                    "x": evidence.features(),
                    "probability": evidence.probability,
                    "several": several,
                    "sx": sx,
                    "gold_count": len(q["gold"]),
                    "query": retrieval.query,  # what was searched, and the paper found (eval/judge.py reads them)
                    "hit": hit,
                }
            )
    return rows


class RawLogistic:
    """A logistic regression fitted on standardised features (so regularisation treats a cosine
    that varies by 0.02 like one that varies by 0.3), with its weights stated for raw features."""

    def __init__(self, strength: float):
        self.strength = strength

    def fit(self, X: np.ndarray, y: np.ndarray) -> RawLogistic:
        self.mean, self.std = X.mean(axis=0), X.std(axis=0) + 1e-9
        model = LogisticRegression(C=self.strength, max_iter=5000).fit((X - self.mean) / self.std, y)
        self.coef = model.coef_[0] / self.std
        self.intercept = float(model.intercept_[0] - (model.coef_[0] * self.mean / self.std).sum())
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(X @ self.coef + self.intercept)))


def fit(rows: list[dict], label: str, strength: float, features: str = "x") -> tuple[RawLogistic, np.ndarray]:
    """The model (`strength`: inverse regularisation) and its cross-validated predictions."""
    X = np.array([r[features] for r in rows])
    y = np.array([r["gold"] for r in rows], dtype=int)
    groups = np.array([r["question"] for r in rows])
    predicted = np.zeros(len(rows))
    for train, held in GroupKFold(n_splits=10).split(X, y, groups):
        predicted[held] = RawLogistic(strength).fit(X[train], y[train]).predict(X[held])
    print(f"{label}: {len(rows)} retrieved papers, {int(y.sum())} gold")
    return RawLogistic(strength).fit(X, y), np.where([r["named"] for r in rows], 1.0, predicted)


def best_per_question(rows: list[dict], predicted: np.ndarray) -> dict[tuple, float]:
    """(question, asked with its paper hidden) -> the probability of its best retrieved paper."""
    best: dict[tuple, float] = {}
    for r, p in zip(rows, predicted, strict=True):
        key = (r["question"], r["loo"])
        best[key] = max(best.get(key, 0.0), p)
    return best


def threshold_for(rows: list[dict], predicted: np.ndarray) -> float:
    """The probability under which FALSE_ABSTENTION of the answerable questions fall."""
    best = best_per_question(rows, predicted)
    answerable = {r["question"] for r in rows if r["answerable"] and not r["loo"]}
    return float(np.quantile([best[(q, False)] for q in answerable], FALSE_ABSTENTION))


def abstained(rows: list[dict], predicted: np.ndarray, threshold: float) -> dict[str, tuple[float, int]]:
    """Per kind of question (answerable, written off-corpus, leave-one-out): the share abstained
    on under `threshold`, and how many questions there are."""
    best = best_per_question(rows, predicted)
    kinds = {(r["question"], r["loo"]): r for r in rows}
    chosen = {
        "answerable": [k for k, r in kinds.items() if r["answerable"] and not r["loo"]],
        "written": [k for k, r in kinds.items() if r["written_off_corpus"]],
        "loo": [k for k, r in kinds.items() if r["loo"]],
    }
    return {
        kind: (sum(best[k] < threshold for k in keys) / max(1, len(keys)), len(keys)) for kind, keys in chosen.items()
    }


def report(rows: list[dict], predicted: np.ndarray, threshold: float) -> None:
    share = abstained(rows, predicted, threshold)
    (answerable, a), (written, w), (loo, n) = share["answerable"], share["written"], share["loo"]
    print(
        f"  cross-validated, answer_above {threshold:.3f}: "
        f"false abstention {answerable:.3f} ({a}), "
        f"abstention recall: written off-corpus {written:.3f} ({w}), "
        f"leave-one-out {loo:.3f} ({n})"
    )


def report_several(rows: list[dict], predicted: np.ndarray, cite_above: float) -> None:
    """Cross-validated citation precision and recall of the papers `several` would cite
    (the best paper always is), as `rag eval` counts them on several-papers questions."""
    cited = [p >= cite_above or r["best"] for r, p in zip(rows, predicted, strict=True)]
    right = sum(c and r["gold"] for r, c in zip(rows, cited, strict=True))
    questions = {r["question"]: r["gold_count"] for r in rows}
    found = {q: sum(c and r["gold"] for r, c in zip(rows, cited, strict=True) if r["question"] == q) for q in questions}
    recall = np.mean([found[q] / questions[q] for q in questions])
    print(
        f"  cross-validated, cite_above {cite_above}: citation precision {right / max(1, sum(cited)):.3f}, "
        f"recall {recall:.3f} ({len(questions)} questions)"
    )


def confidence_examples(settings: Settings, splits: list[str]) -> list[dict]:
    """Per question of the tuning splits: its best paper's probability and the share of the
    question its papers lack, under the weights in `settings`, and whether it is answerable
    and its answer cites a gold paper."""
    index = load_index(settings)
    seeing = Assistant(index, settings)
    rows = []
    for split in splits:
        for q in load_questions(SPLITS[split], index.corpus):
            retrieval = seeing.retrieve(*seeing.condense(q["question"], q["history"]))
            evidence = seeing.assess(retrieval, q["question"])
            hits = seeing.sources(retrieval, q["question"])
            missing = (
                None
                if retrieval.multilingual or not hits
                else seeing.retriever.vocabulary.missing(
                    q["question"], [h.paper.paper_id for h in hits], seeing.naming(hits, q["question"])
                )
            )
            rows.append(
                {
                    "answered": bool(hits),
                    "multilingual": retrieval.multilingual,
                    "answerable": bool(q["gold"]),
                    "gold_cited": bool(set(q["gold"]) & {h.paper.paper_id for h in hits}),
                    "best": max((e.probability for e in evidence), default=0.0),
                    "missing": missing.share if missing else None,
                }
            )
    return rows


def confidence_thresholds(rows: list[dict]) -> tuple[float, float, float, float]:
    """(high_above, missing_below, off-corpus high, answerable high with a gold paper cited):
    the pair of the grid under which the most answerable questions get a confident answer
    citing a gold paper while at most OFF_CORPUS_HIGH of the written off-corpus ones do."""
    english = [r for r in rows if not r["multilingual"]]
    off = [r for r in english if not r["answerable"]]
    answerable = [r for r in english if r["answerable"]]
    best = (1.0, 0.0, 0.0, 0.0)  # nothing is high: the fallback when no pair meets the ceiling
    for high_above in HIGH_ABOVE:
        for missing_below in MISSING_BELOW:

            def high(r: dict, high_above: float = high_above, missing_below: float = missing_below) -> bool:
                return r["answered"] and (
                    r["missing"] is None or (r["best"] >= high_above and r["missing"] < missing_below)
                )

            off_high = sum(map(high, off)) / max(1, len(off))
            right = sum(high(r) and r["gold_cited"] for r in answerable) / max(1, len(answerable))
            if off_high <= OFF_CORPUS_HIGH and right > best[3]:
                best = (float(high_above), float(missing_below), off_high, right)
    return best


def main() -> None:
    splits = sys.argv[1].split(",") if len(sys.argv) > 1 else ["dev"]
    settings = Settings(generator="extractive")
    high_above, missing_below, off_high, right = confidence_thresholds(confidence_examples(settings, splits))
    rows = examples(settings)
    print(
        "EvidenceSettings for rag/config.py (cite_share and standalone_margin are chosen with `rag eval --split dev`):"
    )
    for family in ("english", "multilingual"):
        subset = [r for r in rows if r["multilingual"] == (family == "multilingual")]
        model, predicted = fit(subset, family, strength=1.0)
        threshold = threshold_for(subset, predicted)
        report(subset, predicted, threshold)
        weights = ", ".join(f"{name}={weight:.2f}" for name, weight in zip(FEATURES, model.coef, strict=True))
        # Another script's words cannot be looked up in English abstracts: high or none.
        confident = (
            f"high_above={high_above:.2f}, missing_below={missing_below:.2f}"
            if family == "english"
            else f"high_above={threshold:.2f}, missing_below=1.00"
        )
        print(
            f"  {family} = EvidenceWeights(bias={model.intercept:.2f}, {weights}, "
            f"answer_above={threshold:.2f}, {confident})"
        )
    print(
        f"  confidence on {'+'.join(splits)} (the weights in the settings): off-corpus answered high {off_high:.3f}, "
        f"answerable answered high citing a gold paper {right:.3f}"
    )
    several = [r for r in rows if r["several"] and not r["multilingual"]]
    for question in {r["question"] for r in several}:  # the paper the evidence model likes best is always cited
        own = [r for r in several if r["question"] == question]
        best = max(own, key=lambda r: r["probability"])
        for r in own:
            r["best"] = r is best
    model, predicted = fit(several, "several papers", strength=1.0, features="sx")
    report_several(several, predicted, SeveralWeights.model_fields["cite_above"].default)
    weights = ", ".join(f"{name}={weight:.2f}" for name, weight in zip(SEVERAL_FEATURES, model.coef, strict=True))
    print(f"  several = SeveralWeights(bias={model.intercept:.2f}, {weights})")


if __name__ == "__main__":
    main()
