"""Fit the framing tagger (rag/common/framing_weights.py `FramingTagger`) on the dev side, choose the
threshold of its reading of where a word sits (`FramingWeights.placed_below`) by the verdict itself,
and say how it does; never on test.

A casual question's request words ("give me the lowdown on", "the key trick", "anything in this
collection") are nouns and adjectives no answering paper holds, so they were named as missing above
right answers; spaCy's part-of-speech rules (rag/query/framing.py) and the framing model of missing
constraints (eval/framing.py) reach only some. The tagger reads each word in context instead.

Examples: each word of a question that its analysis puts in a constraint, in the dev-side splits
whose writers listed each question's constraints: 1 (content) inside a listed constraint; 0
(framing) inside a listed framing phrase, or, in a split that lists none, outside every constraint.
Two readings (`FramingTagger`): the word's own, a logistic regression over its unit vector in context
(the English encoder's layer `LAYER`, the mean of its pieces) and its Zipf frequency, learned from
`WORD_LABELLED`; and where it sits, a network of one hidden layer over those and the word's place in
the question (rag/query/framing.py `structure`), learned from every split of `LABELLED`. Cross-validated
in 5 folds by paper; the network chosen by leaving out one labelled split at a time (a writer whose
styles it never saw, docs/evaluation.md).

Threshold (`placed_below`; the word's reading keeps `tagger_below`): the verdict over eval/framing.py's
tuning splits and dev's leave-one-out variants, each question analysed and retrieved once, judged at
every candidate by the tagger fitted without its paper's fold. Chosen: the one that gives the most
answerable questions a `high` answer citing a gold paper while at least `PRECISION_OF_HIGH` of the
`high` answers do and the guard holds:
the contrast twins (a question with one term swapped for a sibling no paper covers) of all splits
together, and dev's leave-one-out variants, are answered `high` no more often than with the tagger
off, but for `OFF_CORPUS_SLACK` (one in 200; per split, a split of 100 twins could gain none).
The written off-corpus questions are reported: a framed word can be the one a false premise hangs
on ("the score the GCPA paper defines"), which no word check sees.

    .venv/bin/python -m eval.tagger                # fit and report
    .venv/bin/python -m eval.tagger --every 3      # every third question: a quick run
    .venv/bin/python -m eval.tagger --write        # ...and adopt it
    .venv/bin/python -m eval.tagger --labelled dev_casual dev_casual2   # learn from these splits only
    .venv/bin/python -m eval.tagger --by-split     # ...and say how it does on each split left out
"""

from __future__ import annotations

import argparse
import json
import re
import zlib
from datetime import date

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.neural_network import MLPClassifier

from eval.calibrate import tuning
from eval.framing import OFF_CORPUS_SLACK, PRECISION_OF_HIGH, SPLITS, papers_of, questions_asked, with_framing
from rag.common.framing_weights import FRAMING_TAGGER, FramingTagger, FramingWeights
from rag.common.settings import Settings, load_settings
from rag.common.weights import FITTED_WEIGHTS, fit_record, write_fitted
from rag.index.stores import load_index
from rag.query.analysis import analyse
from rag.query.framing import STRUCTURE_COLUMNS, placed_inputs, words_in_context

# The dev-side splits the shipped tagger learned from (their questions list constraints and framing): the
# word's reading from the first three (learning it from dev_casual4 too held the guard only at a lower
# threshold, docs/evaluation.md; from all six it read the "tinker with the machinery of" as
# content, 0.31), where it sits from all.
WORD_LABELLED = ("dev_casual", "dev_casual2", "dev_casual3")
LABELLED = ("dev", *WORD_LABELLED, "dev_casual4", "dev_casual5")
FOLDS = 5
# The encoder's layer read: cross-validated on the dev side's 5,969 words, AUC (framing words
# caught where 1 % of content words are lost) layer 3 0.909 (0.52), 4 0.912 (0.52), 5 0.902 (0.50),
# 6, the last, 0.880 (0.44); the last mixes a word with its sentence, an earlier one keeps the word.
LAYER = 4
# Hidden units and L2 strength: left out split by split (the five LABELLED), the mean AUC and the framing
# words caught where 1 % of content words are lost: 16 units 0.924 / 0.620, 32 0.928 / 0.638, 64 0.930 /
# 0.668 (0.930 / 0.653 at alpha 0.1); a logistic regression over the same inputs 0.921 / 0.548, over the
# word's vector and frequency alone (the tagger before) 0.903 / 0.559.
HIDDEN = 64
ALPHA = 0.01
# The word's own reading: inverse L2 strength, cross-validated at layer 4 (0.3, 1, 3: AUC 0.906, 0.912,
# 0.915). Alone, the network reads the "tinker with the machinery of" as content (0.96): it adds.
C = 1.0
THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
GUARDS = ("twins", "leave-one-out")  # the kinds of off-corpus questions whose `high` may not rise


def kind(group: tuple[str, str]) -> str:
    """The kind of question of a (split, kind) group."""
    return group[1]


def fold(paper: str) -> int:
    """A paper's fold, the same in every run."""
    return zlib.crc32(paper.encode()) % FOLDS


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(a <= start and end <= b for a, b in spans)


def _spans(text: str, phrases: list[str]) -> list[tuple[int, int]]:
    found = (re.search(re.escape(phrase), text, re.I) for phrase in phrases)
    return [match.span() for match in found if match]


def examples(
    settings: Settings, labelled: tuple[str, ...] = LABELLED
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(inputs, labels, papers, splits): a row per labelled word (see the module's docstring); its
    inputs the word's vector, its Zipf frequency / 7 and where it sits, as `FramingTagger` reads them."""
    index = load_index(settings)
    inputs, labels, papers, splits = [], [], [], []
    for split in labelled:
        questions = tuning(split, index.corpus)
        paper_of = papers_of(questions)
        for q in questions:
            if "constraints" not in q:
                continue
            text = q["question"]
            candidates = set(" ".join(analyse(text).constraints).lower().split())
            content, framing = _spans(text, q["constraints"]), _spans(text, q.get("framing", []))
            read = index.embedder.tokens([text], LAYER)[0]  # type: ignore[attr-defined]
            words = words_in_context(text, read, LAYER)
            rows = placed_inputs(text, words, settings.judging.tagger_model)
            for (word, span, _), row in zip(words, rows, strict=True):
                if word not in candidates:
                    continue
                if _inside(content, *span):
                    label = 1
                elif "framing" not in q or _inside(framing, *span):
                    label = 0
                else:
                    continue
                inputs.append(row)
                labels.append(label)
                papers.append(paper_of[q["id"]])
                splits.append(split)
    return np.vstack(inputs), np.asarray(labels), papers, splits


def fit(inputs: np.ndarray, labels: np.ndarray, words: np.ndarray, encoder: str, parser: str) -> FramingTagger:
    """Both readings (`FramingTagger`): the word's over its vector and frequency, from the rows `words`
    marks, and where it sits, a network over all of each row, from every row."""
    width = inputs.shape[1] - STRUCTURE_COLUMNS  # where it sits comes last
    word = LogisticRegression(max_iter=5000, C=C, class_weight="balanced").fit(inputs[words, :width], labels[words])
    sits = MLPClassifier(
        hidden_layer_sizes=(HIDDEN,), alpha=ALPHA, max_iter=300, early_stopping=True, random_state=0
    ).fit(inputs, labels)
    (hidden, output), (hidden_bias, output_bias) = sits.coefs_, sits.intercepts_
    return FramingTagger(
        encoder=encoder,
        layer=LAYER,
        bias=round(float(word.intercept_[0]), 5),
        zipf=round(float(word.coef_[0][-1]), 5),
        vector=[round(float(w), 5) for w in word.coef_[0][:-1]],
        parser=parser,
        hidden=[[round(float(w), 4) for w in unit] for unit in hidden.T],
        hidden_bias=[round(float(b), 4) for b in hidden_bias],
        output=[round(float(w), 4) for w in output[:, 0]],
        output_bias=round(float(output_bias[0]), 4),
    )


def caught(predicted: np.ndarray, labels: np.ndarray, lost: float = 0.01) -> float:
    """The share of framing words read as framing where `lost` of the content words are."""
    return float((predicted[labels == 0] < np.quantile(predicted[labels == 1], lost)).mean())


def as_json(tagger: FramingTagger) -> str:
    """The tagger as JSON, its word vector on one line and each hidden unit's weights on one line."""
    fields = tagger.model_dump()
    vector, hidden = fields.pop("vector"), fields.pop("hidden")
    rows = ",\n  ".join(json.dumps(unit) for unit in hidden)
    return json.dumps(fields, indent=1)[:-2] + f',\n "vector": {json.dumps(vector)},\n "hidden": [\n  {rows}\n ]\n}}\n'


def judged(settings: Settings, configs: list[FramingWeights], taggers: dict[int, FramingTagger], every: int):
    """The verdict on every tuning question under each framing of `configs`, by the tagger of its
    paper's fold: a list of rows per config. Each question is analysed and retrieved once."""
    variants = [with_framing(settings, framing) for framing in configs]
    out: list[list[dict]] = [[] for _ in configs]
    for split, q, asker, ask, retrieval in questions_asked(settings, SPLITS, every, lambda p: taggers[fold(p)]):
        asked_as = "leave-one-out" if q.get("exclude") else "twins" if q.get("contrast_of") else "written"
        for rows, variant in zip(out, variants, strict=True):
            asker.judge.settings = variant
            verdict = asker.judge.verdict(retrieval, ask)
            high = verdict.confidence == "high"
            rows.append(
                {
                    "group": (split, asked_as),
                    "answerable": bool(q["gold"]),
                    "high": high,
                    "gold_high": high and bool(set(q["gold"]) & {h.paper.paper_id for h in verdict.hits}),
                }
            )
    return out


def figures(rows: list[dict]) -> dict[str, float]:
    high = [r for r in rows if r["high"]]
    answerable = sum(r["answerable"] for r in rows)
    off = len(rows) - answerable
    return {
        "precision": round(sum(r["gold_high"] for r in high) / max(1, len(high)), 3),
        "coverage": round(sum(r["gold_high"] for r in rows) / max(1, answerable), 3),
        "off_corpus_high": round(sum(not r["answerable"] for r in high) / max(1, off), 3),
    }


def by_group(rows: list[dict], key=lambda group: group) -> dict:
    """Figures per split and kind of question (written, twins, leave-one-out), or per `key` of that."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(key(r["group"]), []).append(r)
    return {group: figures(part) for group, part in groups.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every", type=int, default=1, help="every Nth question of each tuning split (a quick run)")
    parser.add_argument("--labelled", nargs="+", default=list(LABELLED), help="the splits whose words it learns from")
    parser.add_argument("--by-split", action="store_true", help="also fit without each labelled split, and test on it")
    parser.add_argument("--write", action="store_true", help=f"write {FRAMING_TAGGER.name} and placed_below")
    args = parser.parse_args()
    settings = load_settings()
    encoder, spacy_model = settings.indexing.embedding_model, settings.judging.tagger_model
    inputs, labels, papers, splits = examples(settings, tuple(args.labelled))
    words = np.isin(splits, WORD_LABELLED)

    def fitted(rows: np.ndarray) -> FramingTagger:
        return fit(inputs[rows], labels[rows], words[rows], encoder, spacy_model)

    if args.by_split:
        for split in args.labelled:
            out = np.asarray(splits) == split
            p, held = fitted(~out).placed(inputs[out]), labels[out]
            print(f"{split} left out: AUC {roc_auc_score(held, p):.3f}, framing caught {caught(p, held):.3f}")
    folds = np.asarray([fold(p) for p in papers])
    taggers = {k: fitted(folds != k) for k in range(FOLDS)}
    predicted = np.zeros(len(labels))
    for k, tagger in taggers.items():
        predicted[folds == k] = tagger.placed(inputs[folds == k])
    auc = float(roc_auc_score(labels, predicted))
    print(
        f"{len(labels)} words labelled ({int(labels.sum())} content), where they sit cross-validated: AUC "
        f"{auc:.3f}, framing caught {caught(predicted, labels):.3f}"
    )
    if args.write:  # first: the assistant that judges loads the shipped tagger
        tagger = fitted(np.ones(len(labels), dtype=bool))
        tagger.fit = {
            "date": date.today().isoformat(),
            "splits": list(args.labelled),
            "word_splits": list(WORD_LABELLED),
            "words": len(labels),
            "content": int(labels.sum()),
            "C": C,
            "hidden": HIDDEN,
            "alpha": ALPHA,
            "placed_cross_validated_auc": round(auc, 3),
        }
        FRAMING_TAGGER.write_text(as_json(tagger), encoding="utf-8")
    current = settings.judging.evidence.framing
    configs = [current.model_copy(update={"placed_below": below}) for below in (0.0, *THRESHOLDS)]
    off, *runs = judged(settings, configs, taggers, args.every)
    floors, pooled, before = by_group(off), by_group(off, kind), figures(off)
    print(f"where it sits not read: {before}")
    best: tuple[FramingWeights, dict[str, float]] = (configs[0], before)
    for framing, rows in zip(configs[1:], runs, strict=True):
        got, groups = figures(rows), by_group(rows)
        # The guard, pooled over the splits: one in 200 of a kind, not one in a split of 100.
        raised = [
            k
            for k, f in by_group(rows, kind).items()
            if k in GUARDS and f["off_corpus_high"] > pooled[k]["off_corpus_high"] + OFF_CORPUS_SLACK
        ]
        print(f"placed_below {framing.placed_below}: {got}" + (f"; more off-corpus high in {raised}" if raised else ""))
        for group, f in sorted(groups.items()):
            if f != floors[group]:
                print(f"    {group[0]} {group[1]}: {floors[group]} -> {f}")
        if not raised and got["precision"] >= PRECISION_OF_HIGH and got["coverage"] > best[1]["coverage"]:
            best = (framing, got)
    print(f"chosen placed_below {best[0].placed_below}: {before} -> {best[1]}")
    if args.write:
        evidence = settings.judging.evidence
        framing = evidence.framing.model_copy(update={"placed_below": best[0].placed_below})
        record = fit_record([*SPLITS, "dev leave-one-out"], every=args.every, before=before, after=best[1])
        write_fitted(FITTED_WEIGHTS, evidence.model_copy(update={"framing": framing}), {"tagger": record})
        print(f"wrote {FRAMING_TAGGER} and {FITTED_WEIGHTS}")


if __name__ == "__main__":
    main()
