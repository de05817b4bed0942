"""Fit the evidence weights (rag/judge/evidence.py) on the dev split only, and say how they do.

Examples: the first `answer_sources` retrieved papers of every dev question, labelled 1 when the
paper is gold; plus every one-paper dev question asked again with its paper hidden (leave one
out), where no retrieved paper answers; the same for eval/data/dev_multilingual.jsonl, dev's
questions in fourteen other languages. One logistic regression for English questions and one
for questions in other languages (the same features, multilingual-e5 cosines), fitted on
standardised features and checked by 10-fold cross-validation grouped by question. The
multilingual set is small and its cosines vary little, so its probabilities are less confident.
`answer_above` is the cross-validated probability under which 3 % of the answerable dev
questions would be refused. A third regression, on the dev questions answered as a list (their
papers as the assistant sees them), says which papers belong in the answer (`SeveralWeights`,
cited above `cite_above`). The weights are fitted within their signs (`EVIDENCE_SIGNS`).
Then `high_above`, `missing_below` and `soft_above`, which split answers into high and low
confidence (rag/judge/constraints.py): the triple under which the most answerable questions of the
tuning splits (dev, its leave-one-out variants, eval/dev_contrast.jsonl's contrast twins and
paraphrases) get a high answer citing a gold paper while at least 95 % of the high answers
do (for the weights already in the settings); for questions in other languages, whose words
cannot be looked up in English abstracts, `high_above` alone, by the same rule on
dev_multilingual and dev's Chinese questions. Prints what it fits and how it does; with --write,
writes them, with that record, to rag/common/fitted_weights.toml (or FILE), which the settings read.

    .venv/bin/python -m eval.calibrate [SPLITS]   # tuning splits for the confidence (default below)
    .venv/bin/python -m eval.calibrate --every 3  # every third question of each: a quick run of the script
    .venv/bin/python -m eval.calibrate --write    # ...and adopt the fit: the settings' defaults from now on
    .venv/bin/python -m eval.calibrate --write --parts multilingual  # refit one part, keep the others
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold

from rag.assistant import Assistant
from rag.common.settings import PROJECT_ROOT, Settings
from rag.common.weights import FITTED_WEIGHTS, EvidenceSettings, EvidenceWeights, fit_record, write_fitted

# Every split file of eval/data by name (dev and the dev-side files the tuning reads).
from rag.evaluation.runs import DATA_FILES as SPLITS
from rag.evaluation.runs import EVAL_DATA, leave_one_out, load_questions
from rag.index.stores import load_index
from rag.judge.constraints import held_share
from rag.judge.evidence import FEATURES, SEVERAL_FEATURES, several_features
from rag.query.analysis import read, read_query

FALSE_ABSTENTION = 0.03  # the ceiling on abstaining on an answerable question
PRECISION_OF_HIGH = 0.95  # the floor on the share of confident answers that cite a gold paper
HIGH_ABOVE = np.round(np.arange(0.1, 0.96, 0.05), 2)  # the grid searched for high_above,
MISSING_BELOW = np.round(np.arange(0.0, 0.61, 0.05), 2)  # missing_below
SOFT_ABOVE = (0.5, 0.6, 0.7, 0.8, 0.9, 1.01)  # and soft_above (1.01: constraints found by their words only)
EVIDENCE_SPLITS = ("dev", "dev_multilingual")  # what the evidence weights are fitted on, with their leave-one-out
CONFIDENCE_SPLITS = "dev,dev_contrast,dev_multilingual"  # and the confidence thresholds, by default
PARTS = ("english", "multilingual", "several")  # what --parts may refit


def tuning(split: str, corpus, every: int = 1) -> list[dict]:
    """A tuning split's questions (dev, or a dev-side file in eval/data/), every `every`th of them."""
    return load_questions(SPLITS.get(split, EVAL_DATA / f"{split}.jsonl"), corpus)[::every]


def examples(settings: Settings, every: int = 1):
    index = load_index(settings)
    dev = [q for split in EVIDENCE_SPLITS for q in tuning(split, index.corpus, every)]
    seeing = Assistant(index, settings)
    rows = []
    for q in dev + leave_one_out(dev):
        assistant = Assistant(index, settings, seeing.generator, exclude=q["exclude"]) if q.get("exclude") else seeing
        query, alone = assistant.condense(read(q["question"]), q["history"])
        query = assistant.analyse(q["question"], query).sought.text  # less its framing words, as answered
        retrieval = alone if alone is not None and alone.query == query else assistant.retriever.search(query)
        # Every retrieved paper, nothing tied to the question, no list made longer.
        hits = retrieval.hits[: settings.answering.answer_sources]
        assessed = assistant.judge.evidence.assess(
            read_query(retrieval.query), hits, retrieval.multilingual, q["question"]
        )
        for hit, evidence in zip(retrieval.hits, assessed, strict=True):
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
                    "query": retrieval.query,  # what was searched, and the paper found (eval/judge.py reads them)
                    "hit": hit,
                }
            )
    return rows


# The sign each evidence feature's weight must have (EvidenceWeights' bounds): more cosine,
# coverage or margin is never evidence against a paper, an unknown name or words found elsewhere
# never for it. The chunk and sentence cosines are collinear (0.85), so an unbounded fit can give
# one of them a negative weight that the settings refuse.
EVIDENCE_SIGNS = {"dense": 1, "sentence": 1, "coverage": 1, "margin": 1, "unknown_name": -1, "elsewhere": -1}


def asked(assistant: Assistant, settings: Settings, q: dict):
    """A question's analysis and its retrieval, as the assistant answers it (a list retrieves more)."""
    query, alone = assistant.condense(read(q["question"]), q["history"])
    ask = assistant.analyse(q["question"], query)
    k = max(settings.retrieval.k, settings.answering.list_sources) if ask.listing else None
    return ask, assistant.retrieve(ask, alone, k)


def several_examples(settings: Settings, every: int = 1) -> list[dict]:
    """The papers an English dev question asking for several papers may cite, as the assistant
    sees them (its analysis, the longer list retrieved for a list and the papers tied to the
    question), labelled 1 when gold; the best-scored paper of each question is always cited."""
    index = load_index(settings)
    assistant = Assistant(index, settings)
    rows = []
    for q in tuning("dev", index.corpus, every):
        if not q["gold"]:
            continue
        ask, retrieval = asked(assistant, settings, q)
        if not (ask.several or ask.intent in ("list", "summary")) or retrieval.multilingual:
            continue
        assessed = assistant.judge.assess(retrieval, ask)
        hits = assistant.judge.candidates(retrieval, ask.tied, ask.listing)
        best = max(range(len(assessed)), key=lambda i: assessed[i].probability)
        for i, (hit, evidence, sx) in enumerate(zip(hits, assessed, several_features(assessed), strict=True)):
            rows.append(
                {
                    "question": q["id"],
                    "gold": hit.paper.paper_id in q["gold"],
                    "named": evidence.named,
                    "sx": sx,
                    "best": i == best,
                    "gold_count": len(q["gold"]),
                }
            )
    return rows


class RawLogistic:
    """A logistic regression fitted on standardised features (so regularisation treats a cosine
    that varies by 0.02 like one that varies by 0.3), with its weights stated for raw features.
    `signs`: per feature, the sign its weight must have (0: any); then the L2-regularised log-loss
    scikit-learn minimises is minimised by SciPy's L-BFGS-B within those bounds, which
    LogisticRegression does not take."""

    def __init__(self, strength: float, signs: tuple[int, ...] | None = None):
        self.strength = strength
        self.signs = signs

    def fit(self, X: np.ndarray, y: np.ndarray) -> RawLogistic:
        self.mean, self.std = X.mean(axis=0), X.std(axis=0) + 1e-9
        Z = (X - self.mean) / self.std
        if self.signs is None:
            model = LogisticRegression(C=self.strength, max_iter=5000).fit(Z, y)
            coef, intercept = model.coef_[0], float(model.intercept_[0])
        else:
            coef, intercept = self._bounded(Z, y)
        self.coef = coef / self.std
        self.intercept = float(intercept - (coef * self.mean / self.std).sum())
        return self

    def _bounded(self, Z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        sign = 2 * y - 1

        def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
            w, b = params[:-1], params[-1]
            margin = sign * (Z @ w + b)
            value = np.logaddexp(0, -margin).sum() * self.strength + 0.5 * w @ w
            slope = -sign * expit(-margin) * self.strength
            return float(value), np.append(Z.T @ slope + w, slope.sum())

        bounds = [(0, None) if s > 0 else (None, 0) if s < 0 else (None, None) for s in self.signs or ()]
        fitted = minimize(loss, np.zeros(Z.shape[1] + 1), jac=True, method="L-BFGS-B", bounds=[*bounds, (None, None)])
        return fitted.x[:-1], float(fitted.x[-1])

    def predict(self, X: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(X @ self.coef + self.intercept)))


def fit(
    rows: list[dict], label: str, strength: float, features: str = "x", signs: tuple[int, ...] | None = None
) -> tuple[RawLogistic, np.ndarray]:
    """The model (`strength`: inverse regularisation) and its cross-validated predictions."""
    X = np.array([r[features] for r in rows])
    y = np.array([r["gold"] for r in rows], dtype=int)
    groups = np.array([r["question"] for r in rows])
    predicted = np.zeros(len(rows))
    for train, held in GroupKFold(n_splits=min(10, len(set(groups)))).split(X, y, groups):
        predicted[held] = RawLogistic(strength, signs).fit(X[train], y[train]).predict(X[held])
    print(f"{label}: {len(rows)} retrieved papers, {int(y.sum())} gold")
    return RawLogistic(strength, signs).fit(X, y), np.where([r["named"] for r in rows], 1.0, predicted)


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


def report(rows: list[dict], predicted: np.ndarray, threshold: float) -> dict[str, float | int]:
    share = abstained(rows, predicted, threshold)
    (answerable, a), (written, w), (loo, n) = share["answerable"], share["written"], share["loo"]
    print(
        f"  cross-validated, answer_above {threshold:.3f}: "
        f"false abstention {answerable:.3f} ({a}), "
        f"abstention recall: written off-corpus {written:.3f} ({w}), "
        f"leave-one-out {loo:.3f} ({n})"
    )
    return {
        "examples": len(rows),
        "false_abstention": round(float(answerable), 3),
        "abstained_written_off_corpus": round(float(written), 3),
        "abstained_leave_one_out": round(float(loo), 3),
        "answerable": a,
        "written_off_corpus": w,
        "leave_one_out": n,
    }


def report_several(rows: list[dict], predicted: np.ndarray, cite_above: float) -> dict[str, float | int]:
    """Cross-validated citation precision and recall of the papers `several` would cite
    (the best paper always is), as `rag eval` counts them on several-papers questions."""
    cited = [p >= cite_above or r["best"] for r, p in zip(rows, predicted, strict=True)]
    right = sum(c and r["gold"] for r, c in zip(rows, cited, strict=True))
    questions = {r["question"]: r["gold_count"] for r in rows}
    found = {q: sum(c and r["gold"] for r, c in zip(rows, cited, strict=True) if r["question"] == q) for q in questions}
    recall = float(np.mean([found[q] / questions[q] for q in questions]))
    precision = right / max(1, sum(cited))
    print(
        f"  cross-validated, cite_above {cite_above}: citation precision {precision:.3f}, "
        f"recall {recall:.3f} ({len(questions)} questions)"
    )
    return {
        "questions": len(questions),
        "cite_above": cite_above,
        "citation_precision": round(float(precision), 3),
        "recall": round(recall, 3),
    }


def confidence_examples(settings: Settings, splits: list[str], every: int = 1) -> list[dict]:
    """Per question of the tuning splits (dev with its leave-one-out variants, and the dev
    contrast pairs and paraphrases): its best paper's probability and its constraints checked
    in the answering papers, under the weights in `settings`, and whether it is answerable and
    its answer cites a gold paper."""
    index = load_index(settings)
    seeing = Assistant(index, settings)
    questions = []
    for split in splits:
        part = tuning(split, index.corpus, every)
        questions += part + (leave_one_out(part) if split in EVIDENCE_SPLITS else [])
    rows = []
    for q in questions:
        asker = Assistant(index, settings, exclude=q["exclude"]) if q.get("exclude") else seeing
        ask, retrieval = asked(asker, settings, q)
        verdict = asker.judge.verdict(retrieval, ask)
        rows.append(
            {
                "answered": bool(verdict.hits),
                "multilingual": retrieval.multilingual,
                "answerable": bool(q["gold"]),
                "gold_cited": bool(set(q["gold"]) & {h.paper.paper_id for h in verdict.hits}),
                "best": verdict.best,
                "checks": list(verdict.checks),
            }
        )
    return rows


def confidence_thresholds(rows: list[dict]) -> tuple[float, float, float, float, float]:
    """(high_above, missing_below, soft_above, precision of high, coverage): of the grid, the
    triple under which the most answerable questions get a confident answer citing a gold paper
    (coverage) while at least PRECISION_OF_HIGH of the confident answers do."""
    english = [r for r in rows if not r["multilingual"] and r["answered"]]
    answerable = sum(r["answerable"] for r in rows if not r["multilingual"])
    best = (1.0, 0.0, 1.01, 1.0, 0.0)  # nothing is high unless every constraint is found
    for high_above in HIGH_ABOVE:
        for soft_above in SOFT_ABOVE:
            held = [held_share(r["best"], r["checks"], high_above, soft_above) for r in english]
            for missing_below in MISSING_BELOW:
                high = [r for r, h in zip(english, held, strict=True) if h > 1.0 - missing_below]
                right = sum(r["gold_cited"] for r in high)
                precision, coverage = right / max(1, len(high)), right / max(1, answerable)
                if precision >= PRECISION_OF_HIGH and coverage > best[4]:
                    best = (float(high_above), float(missing_below), float(soft_above), precision, coverage)
    return best


def multilingual_high_above(rows: list[dict]) -> tuple[float, float, float]:
    """(high_above, precision of high, coverage) for questions in other languages: of the grid,
    the one under which the most answerable ones get a high answer citing a gold paper while at
    least PRECISION_OF_HIGH of the high answers do; their best paper's probability alone decides."""
    foreign = [r for r in rows if r["multilingual"]]
    answerable = sum(r["answerable"] for r in foreign)
    best = (1.0, 1.0, 0.0)
    for high_above in HIGH_ABOVE:
        high = [r for r in foreign if r["answered"] and r["best"] >= high_above]
        right = sum(r["gold_cited"] for r in high)
        precision, coverage = right / max(1, len(high)), right / max(1, answerable)
        if precision >= PRECISION_OF_HIGH and coverage > best[2]:
            best = (float(high_above), precision, coverage)
    return best


def fitted_weights(model: RawLogistic, names: tuple[str, ...]) -> dict[str, float]:
    """A fitted model's bias and weights, to two decimals as the settings have always held them."""
    return {
        "bias": round(model.intercept, 2),
        **{n: round(float(w), 2) for n, w in zip(names, model.coef, strict=True)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Fit the evidence weights and confidence thresholds on dev.")
    parser.add_argument("splits", nargs="?", default=CONFIDENCE_SPLITS, help="tuning splits for the confidence")
    parser.add_argument("--every", type=int, default=1, help="read every Nth question of each (a quick run)")
    parser.add_argument(
        "--write",
        nargs="?",
        const=FITTED_WEIGHTS,
        type=Path,
        metavar="FILE",
        help=f"write the fitted weights and their record to FILE (default {FITTED_WEIGHTS.relative_to(PROJECT_ROOT)}, "
        "which the settings read); without it, only print them",
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help="the parts refitted and written, comma-separated (the others are kept as they are)",
    )
    args = parser.parse_args()
    splits, parts = args.splits.split(","), set(args.parts.split(","))
    if not parts <= set(PARTS):
        parser.error(f"--parts: choose among {', '.join(PARTS)}")
    settings = Settings(generator="extractive")
    current = settings.judging.evidence
    confident = confidence_examples(settings, splits, args.every)
    high_above, missing_below, soft_above, precision, coverage = confidence_thresholds(confident)
    foreign_high_above, foreign_precision, foreign_coverage = multilingual_high_above(confident)
    rows = examples(settings, args.every)
    print("The evidence weights (cite_share and standalone_margin are chosen with `rag eval --split dev`):")
    loo = [part for split in EVIDENCE_SPLITS for part in (split, f"{split} leave-one-out")]
    fitted: dict[str, EvidenceWeights] = {}
    record = {}
    for family in [family for family in ("english", "multilingual") if family in parts]:
        subset = [r for r in rows if r["multilingual"] == (family == "multilingual")]
        model, predicted = fit(subset, family, strength=1.0, signs=tuple(EVIDENCE_SIGNS[f] for f in FEATURES))
        threshold = threshold_for(subset, predicted)
        figures = report(subset, predicted, threshold)
        weights = {**fitted_weights(model, FEATURES), "answer_above": round(threshold, 2)}
        # Another language's words cannot be looked up in English abstracts: the probability alone decides.
        if family == "english":
            weights |= {"high_above": high_above, "missing_below": missing_below, "soft_above": soft_above}
        else:
            weights |= {"high_above": foreign_high_above}
        fitted[family] = getattr(current, family).model_copy(update=weights)
        print(f"  {family}: " + ", ".join(f"{name} {value}" for name, value in weights.items()))
        record[family] = fit_record(loo, every=args.every, **figures)
    if "english" in parts:
        print(
            f"  confidence on {'+'.join(splits)} (the weights in the settings): precision of high {precision:.3f}, "
            f"coverage (answerable answered high citing a gold paper) {coverage:.3f}"
        )
        record["confidence"] = fit_record(
            [
                part
                for split in splits
                for part in ([split, f"{split} leave-one-out"] if split in EVIDENCE_SPLITS else [split])
            ],
            every=args.every,
            precision_of_high_at_least=PRECISION_OF_HIGH,
            precision_of_high=round(precision, 3),
            coverage=round(coverage, 3),
        )
    if "multilingual" in parts:
        print(
            f"  confidence in other languages: precision of high {foreign_precision:.3f}, "
            f"coverage {foreign_coverage:.3f}"
        )
        record["multilingual_confidence"] = fit_record(
            [split for split in splits if split in EVIDENCE_SPLITS],
            every=args.every,
            precision_of_high_at_least=PRECISION_OF_HIGH,
            precision_of_high=round(foreign_precision, 3),
            coverage=round(foreign_coverage, 3),
        )
    update: dict[str, object] = dict(fitted)
    if "several" in parts:
        several = several_examples(settings, args.every)
        model, predicted = fit(several, "several papers", strength=1.0, features="sx")
        record["several"] = fit_record(
            ["dev"], every=args.every, **report_several(several, predicted, current.several.cite_above)
        )
        weights = fitted_weights(model, SEVERAL_FEATURES)
        print("  several: " + ", ".join(f"{name} {value}" for name, value in weights.items()))
        update["several"] = current.several.model_copy(update=weights)
    if args.write:
        evidence = current.model_copy(update=update)
        write_fitted(args.write, EvidenceSettings.model_validate(evidence.model_dump()), record)
        print(f"written to {args.write}")


if __name__ == "__main__":
    main()
