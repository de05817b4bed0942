"""Fit which missing constraints are framing (`FramingWeights`, rag/judge/constraints.py) on the dev
side only, leave-one-paper-out, and say how it does.

A constraint no answering paper holds, even softly, made an answer `low` whatever it was: "None
of these abstracts mentions "rundown"" above a right answer. Whether the question rests on it is
told by how far the question's meaning moves without it (the English encoder's cosine between the
question and the question without the phrase), by how everyday its words are (wordfreq's Zipf
frequency) and by how well the answering papers hold its words read in context (the mean and the
least of each word's best cosine with the papers' words, the encoder's last layer): a logistic
regression on those four, which knows no word list and so reaches phrasings no rule has seen. A
missing constraint it says the question rests on makes the answer low whatever it weighs.

Examples: every missing constraint of the tuning splits' questions, as the judge sees them.
Labelled 0 (framing: the answer is right without it) in an answerable question whose answer cites
a gold paper; 1 (what the question rests on) in an off-corpus twin or a leave-one-out variant,
when its original lacks the same phrase (the swapped words, the hidden paper's content). Fitted by
5-fold cross-validation grouped by paper (a question, its twins and its leave-one-out variant in
one fold); `block_above` is the cross-validated probability that gives the most answerable
questions a high answer citing a gold paper while at least `PRECISION_OF_HIGH` of the high
answers do and no split answers more of its off-corpus questions high than with no framing
model, what is missing weighed by its share (the guard: the contrast twins and leave-one-out variants). Run after
eval/calibrate.py (it reads the thresholds that one fits).

    .venv/bin/python -m eval.framing               # fit and report
    .venv/bin/python -m eval.framing --every 3     # every third question: a quick run
    .venv/bin/python -m eval.framing --write       # ...and adopt the fit (rag/common/fitted_weights.toml)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold

from eval.calibrate import asked, tuning
from rag.assistant import Assistant
from rag.common.framing_weights import FramingTagger, FramingWeights, framing_tagger, sigmoid
from rag.common.settings import Settings, load_settings
from rag.common.weights import FITTED_WEIGHTS, fit_record, write_fitted
from rag.evaluation.runs import leave_one_out
from rag.index.stores import load_index

SPLITS = (
    "dev",
    "dev_contrast",
    "dev_overview",
    "dev_summaries",
    "dev_paraphrases",
    "dev_casual",
    "dev_casual2",
    "dev_casual3",
    "dev_casual4",
    "dev_casual5",
)
PRECISION_OF_HIGH = 0.955  # the floor on the share of high answers citing a gold paper (target 0.95)
# The off-corpus questions (written ones and contrast twins; leave-one-out variants apart) answered
# high may rise by this much over no framing model: they are the guard (at most one in 200).
OFF_CORPUS_SLACK = 0.005
FEATURES = ("salience", "common", "match", "least")
# Measures every missing constraint and frames none: the features, not a decision.
MEASURE = FramingWeights(bias=0.0, salience=0.0, common=0.0, match=0.0, least=0.0, block_above=1e-9)


def shipped_tagger(settings: Settings):
    """The shipped framing tagger and the index whose English encoder it reads (`index.embedder`,
    the judge's reader), for what is fitted on its reading."""
    model = framing_tagger()
    if model is None:
        raise SystemExit("no framing tagger (python -m eval.tagger --write first)")
    return model, load_index(settings)


def papers_of(questions: list[dict]) -> dict[str, str]:
    """Each question's paper by its id: its first gold paper; a twin's is its original's."""
    first = {q["id"]: (q["gold"] or [q["id"]])[0] for q in questions}
    return {q["id"]: first.get(q.get("contrast_of", ""), first[q["id"]]) for q in questions}


def questions_asked(
    settings: Settings,
    splits: tuple[str, ...],
    every: int = 1,
    tagger: Callable[[str], FramingTagger | None] | None = None,
):
    """(split, question, its assistant, its analysis, its retrieval) for each question of the splits
    (dev's leave-one-out variants too, each by an assistant without its paper), with `tagger(paper)`
    as the framing tagger of a question about that paper (None: the service's)."""
    index = load_index(settings)
    seeing = Assistant(index, settings)
    for split in splits:
        questions = tuning(split, index.corpus, every)
        paper = papers_of(questions)
        for q in questions + (leave_one_out(questions) if split == "dev" else []):
            asker = Assistant(index, settings, seeing.generator, exclude=q["exclude"]) if q.get("exclude") else seeing
            if tagger is not None:
                asker.judge.tagger = tagger((q.get("exclude") or [paper[q["id"]]])[0])
            yield split, q, asker, *asked(asker, settings, q)


def with_framing(settings: Settings, framing: FramingWeights) -> Settings:
    """The settings with `framing` as the framing weights."""
    return settings.model_copy(update={"evidence": settings.judging.evidence.model_copy(update={"framing": framing})})


def verdicts(
    settings: Settings,
    framing: FramingWeights,
    splits: tuple[str, ...],
    every: int = 1,
    tagger: Callable[[str], FramingTagger | None] | None = None,
):
    """(split, question, its analysis, its retrieval, the verdict, the weights) for each question of
    `questions_asked`, judged with `framing`."""
    for split, q, asker, ask, retrieval in questions_asked(with_framing(settings, framing), splits, every, tagger):
        yield split, q, ask, retrieval, asker.judge.verdict(retrieval, ask), asker.judge.weights(retrieval)


def examples(settings: Settings, splits: tuple[str, ...], every: int = 1) -> list[dict]:
    """Per question of the splits (dev's leave-one-out variants too): what decides its confidence."""
    records = []
    for split, q, ask, retrieval, verdict, w in verdicts(settings, MEASURE, splits, every):
        records.append(
            {
                "split": split,
                "id": q["id"],
                "base": q["id"].removesuffix("-loo") if q.get("exclude") else q.get("contrast_of"),
                "paper": (q["gold"] or q.get("exclude") or [q["id"]])[0],
                "answerable": bool(q["gold"]),
                "gold_cited": bool(set(q["gold"]) & {h.paper.paper_id for h in verdict.hits}),
                "answered": bool(verdict.hits) and not retrieval.multilingual,
                "kept": verdict.confidence,  # multilingual or abstained: the framing changes nothing
                "best": verdict.best,
                "high_above": w.high_above,
                "missing_below": w.missing_below,
                # "X, Y or Z": any one found, or framing, meets them all (rag/judge/constraints.py `either`)
                "alternatives": [list(group) for group in ask.alternatives],
                "unfound": [
                    {
                        "phrase": c.phrase,
                        "weight": c.weight,
                        "other": c.other,
                        "x": [c.salience, c.common, c.match, c.least],
                    }
                    for c in verdict.checks
                    if not c.found(w.soft_above)
                ],
            }
        )
    by_id = {(r["split"], r["id"]): r for r in records}
    for r in records:  # the paper of a twin is its original's
        original = by_id.get((r["split"], r["base"]))
        if original is not None:
            r["paper"] = original["paper"]
    return records


def labelled(records: list[dict]) -> list[tuple[dict, dict, int]]:
    """(question, missing constraint, 1 when the question rests on it) for the constraints a label is known for."""
    by_id = {(r["split"], r["id"]): r for r in records}
    out = []
    for r in records:
        original = by_id.get((r["split"], r["base"])) if r["base"] else None
        if r["answerable"] and r["gold_cited"]:
            out += [(r, u, 0) for u in r["unfound"] if not u["other"]]
        elif not r["answerable"] and original is not None:
            lacking = {u["phrase"] for u in original["unfound"]}
            out += [(r, u, 1) for u in r["unfound"] if not u["other"] and u["phrase"] not in lacking]
    return out


def confidence(r: dict, probability=None, block_above: float = 0.0, decisive_above: float = 1.01) -> str:
    """The question's confidence as rag/judge/verdict.py decides it when `probability(r, u)` says
    how likely it rests on each missing constraint: under `block_above` framing (and an "X, Y or Z"
    it belongs to met), from `decisive_above` low whatever it weighs, between the two weighed by its
    share. No `probability`: no framing model, every missing constraint weighed."""
    if not r["answered"]:
        return r["kept"]
    rests = {u["phrase"]: probability(r, u) for u in r["unfound"] if probability is not None and not u["other"]}
    framed = {phrase for phrase, p in rests.items() if p < block_above}
    met = {phrase for group in r["alternatives"] if framed & set(group) for phrase in group}
    left = [u for u in r["unfound"] if u["phrase"] not in framed | met]
    if not left:
        return "high"
    if r["best"] < r["high_above"] or any(u["other"] or rests.get(u["phrase"], 0.0) >= decisive_above for u in left):
        return "low"
    return "high" if 1.0 - sum(u["weight"] for u in left) > 1.0 - r["missing_below"] else "low"


def figures(records: list[dict], *decision) -> dict[str, float]:
    """Precision and coverage of high, and off-corpus questions answered high, under `decision`
    (`confidence`'s probability and thresholds; none: no framing model)."""
    high = [r for r in records if confidence(r, *decision) == "high"]
    good = sum(r["answerable"] and r["gold_cited"] for r in high)
    answerable = sum(r["answerable"] for r in records)
    off = len(records) - answerable
    return {
        "precision": round(good / max(1, len(high)), 3),
        "coverage": round(good / max(1, answerable), 3),
        "off_corpus_high": round(sum(not r["answerable"] for r in high) / max(1, off), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=int, default=1, help="every Nth question of each split (a quick run)")
    parser.add_argument("--write", nargs="?", const=FITTED_WEIGHTS, type=Path, metavar="FILE")
    args = parser.parse_args()
    settings = load_settings()
    records = examples(settings, SPLITS, args.every)
    rows = labelled(records)
    x = np.array([u["x"] for _, u, _ in rows])
    y = np.array([label for _, _, label in rows])
    groups = [r["paper"] for r, _, _ in rows]
    predicted = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=5).split(x, y, groups):
        predicted[test] = LogisticRegression(max_iter=1000).fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    model = LogisticRegression(max_iter=1000).fit(x, y)
    bias, weights = float(model.intercept_[0]), dict(zip(FEATURES, model.coef_[0].tolist(), strict=True))
    # Out of fold where labelled; the whole fit for the missing constraints no label is known for.
    probabilities = {(r["split"], r["id"], u["phrase"]): p for (r, u, _), p in zip(rows, predicted, strict=True)}
    unlabelled = [
        (r, u) for r in records for u in r["unfound"] if (r["split"], r["id"], u["phrase"]) not in probabilities
    ]
    if unlabelled:
        fitted = model.predict_proba(np.array([u["x"] for _, u in unlabelled]))[:, 1]
        probabilities |= {(r["split"], r["id"], u["phrase"]): p for (r, u), p in zip(unlabelled, fitted, strict=True)}

    def probability(r: dict, u: dict) -> float:
        return probabilities[(r["split"], r["id"], u["phrase"])]

    splits = {split: [r for r in records if r["split"] == split] for split in SPLITS}
    # The guard's groups: each split's written questions apart from dev's leave-one-out variants,
    # so that the many variants do not dilute the written off-corpus questions.
    groups: dict[tuple[str, bool], list[dict]] = {}
    for r in records:
        groups.setdefault((r["split"], r["id"].endswith("-loo")), []).append(r)
    floors = {group: figures(part)["off_corpus_high"] for group, part in groups.items()}
    before = figures(records)
    best = (0.0, 1.01, before)
    for block_above in np.round(np.arange(0.02, 0.61, 0.01), 2):
        for decisive_above in [*np.round(np.arange(block_above, 0.81, 0.05), 2), 1.01]:
            decision = (probability, block_above, decisive_above)
            got = figures(records, *decision)
            # The guard: in no group more off-corpus questions answered high than with no framing
            # model (the written off-corpus questions and contrast twins, the leave-one-out variants).
            guarded = all(
                figures(part, *decision)["off_corpus_high"] <= floors[group] + OFF_CORPUS_SLACK
                for group, part in groups.items()
            )
            if guarded and got["precision"] >= PRECISION_OF_HIGH and got["coverage"] > best[2]["coverage"]:
                best = (float(block_above), float(decisive_above), got)
    block_above, decisive_above, after = best
    print(f"{len(rows)} missing constraints labelled ({int(y.sum())} rested on), {len(records)} questions")
    print(f"weights: bias {bias:.3f}, " + ", ".join(f"{f} {w:.3f}" for f, w in weights.items()))
    print(f"block_above {block_above}, decisive_above {decisive_above}: no framing model {before} -> {after}")
    for split, part in splits.items():
        print(f"  {split}: {figures(part)} -> {figures(part, probability, block_above, decisive_above)}")
    framing = FramingWeights(
        bias=round(bias, 3),
        block_above=block_above,
        decisive_above=decisive_above,
        **{f: round(w, 3) for f, w in weights.items()},
    )
    # The simulation above against the verdict itself, with the weights as written (in-sample).
    simulated = {
        (r["split"], r["id"]): confidence(r, lambda r, u: sigmoid(framing.logit(*u["x"])), block_above, decisive_above)
        for r in records
    }
    differ = [
        (split, q["id"], simulated[(split, q["id"])], verdict.confidence)
        for split, q, _, _, verdict, _ in verdicts(settings, framing, SPLITS, args.every)
        if verdict.confidence != simulated[(split, q["id"])]
    ]
    print(f"the verdict agrees with the simulation on {len(records) - len(differ)} of {len(records)} questions")
    for split, qid, simulation, verdict in differ[:20]:
        print(f"  {split} {qid}: simulated {simulation}, verdict {verdict}")
    if args.write:  # the fields it does not fit (the tagger's, the search's, the asides') as they were
        current = settings.judging.evidence.framing
        fitted_here = {"bias", *FEATURES, "block_above", "decisive_above"}
        kept = {field: getattr(current, field) for field in FramingWeights.model_fields if field not in fitted_here}
        tagged = framing.model_copy(update=kept)
        evidence = settings.judging.evidence.model_copy(update={"framing": tagged})
        record = fit_record(
            [*SPLITS, "dev leave-one-out"],
            every=args.every,
            labelled=len(rows),
            precision_before=before["precision"],
            coverage_before=before["coverage"],
            precision=after["precision"],
            coverage=after["coverage"],
            off_corpus_high=after["off_corpus_high"],
        )
        write_fitted(args.write, evidence, {"framing": record})
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
