"""Dev-side contrast pairs: each answerable one-paper dev question, and twins of it that change
exactly one constraint to something its paper does not say and no abstract of the corpus does.

The data the "is every constraint of the question found in the cited abstract?" decision is
fitted on: an original and its twin differ in one word or phrase, so a rule that tells them
apart has seen the constraint. Hand-written paraphrases of the originals (other words, same
meaning: eval/data/dev_paraphrases.jsonl) stand beside them, so that calling every unfamiliar word
missing does not win.

How a twin is made. `GROUPS` holds the contrast groups, general vocabulary of the field written
here as data: classes of words that stand for one choice (a modality, a domain, a model family,
an architecture, a learning setting, an assumption, a task, hardware, a model size or bit width),
each class a few synonymous forms. A question qualifies when a form of one class is among its
constraints (rag/query/analysis.py) and its gold abstract mentions that class (Snowball-stemmed
words); the form is swapped for a sibling class that neither the gold abstract nor the question
mentions. The twin is kept only when no abstract of the corpus supports it
(`Vocabulary.twin_supporters`: none of the 86 mentions the sibling and holds the twin's other
distinctive words about as well as the gold abstract holds the original's).

The file holds each original used (id "dc-" + its dev id), its twins (`contrast_of`: the
original's id in the file, `change`: "modality: video -> audio") and its paraphrases
(`paraphrase_of`, likewise).

    python -m eval.contrast      # writes eval/data/dev_contrast.jsonl and prints counts per change group

Hand-written: no library makes minimal-pair questions from a vocabulary of the field.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import Stemmer

from rag.index.corpus import Corpus, Paper, load_corpus
from rag.query.analysis import analyse

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "eval" / "data" / "dev.jsonl"
PARAPHRASES = ROOT / "eval" / "data" / "dev_paraphrases.jsonl"
OUT = ROOT / "eval" / "data" / "dev_contrast.jsonl"
# A question's word is distinctive when at most this share of the abstracts holds it ("model",
# "learning" and "LLM" say nothing about which paper answers).
DISTINCTIVE_SHARE = 0.2
# An abstract supports a twin when it mentions the sibling and holds at least this share of the
# twin's other distinctive words, or RELATIVE_SHARE of the share the gold abstract holds of the
# original's, when that is less: a strict test, so a kept twin is off-corpus with room to spare.
SUPPORT_SHARE = 0.5
RELATIVE_SHARE = 0.5
# At most this many twins of one question (each in another group), so that a few long
# questions do not make up the set.
TWINS_PER_QUESTION = 3
# Types whose text alone carries the question in English: a follow-up's constraints sit in its
# history, a Chinese question's words are not the groups' words.
TYPES = ("name", "paraphrase", "fact", "multipart", "multi", "standalone")


@dataclass(frozen=True)
class Group:
    """Classes of words that stand for one choice; a twin swaps one class for a sibling.
    A class is a tuple of synonymous forms, "singular|plural" where the two differ; its first
    form is what a twin writes. `modifier`: the forms qualify a noun ("diffusion LLMs") and are
    swapped only there (not in "generative diffusion is ...")."""

    label: str
    classes: tuple[tuple[str, ...], ...]
    modifier: bool = False


_CNN = (
    "convolutional neural network|convolutional neural networks",
    "CNN|CNNs",
    "convolutional network|convolutional networks",
)
GROUPS: tuple[Group, ...] = (
    Group(
        "modality",
        (
            ("text",),
            ("image|images", "picture|pictures", "photo|photos", "photograph|photographs"),
            ("video|videos",),
            ("audio", "sound|sounds", "speech", "spoken language"),
            ("graph|graphs",),
            ("point cloud|point clouds", "3D shape|3D shapes", "mesh|meshes"),
            ("time series",),
        ),
    ),
    Group(
        "modality",
        (("visual",), ("textual",), ("acoustic", "auditory"), ("tactile",), ("tabular",)),
        modifier=True,
    ),
    Group(
        "domain",
        (
            ("medical", "clinical", "biomedical", "healthcare"),
            ("legal",),
            ("financial",),
            ("educational",),
            ("agricultural",),
            ("astronomical",),
        ),
        modifier=True,
    ),
    Group(
        "domain",
        (
            ("medicine", "healthcare", "clinical practice"),
            ("finance",),
            ("robotics",),
            ("education",),
            ("agriculture",),
            ("autonomous driving",),
        ),
    ),
    Group(
        "architecture",
        (
            ("transformer|transformers",),
            _CNN,
            ("graph neural network|graph neural networks", "GNN|GNNs"),
            ("recurrent neural network|recurrent neural networks", "RNN|RNNs", "LSTM|LSTMs"),
            ("state-space model|state-space models", "state space model|state space models", "SSM|SSMs"),
            ("multilayer perceptron|multilayer perceptrons", "MLP|MLPs"),
        ),
    ),
    Group(
        "architecture",
        (("attention", "self-attention"), ("convolution|convolutions",), ("recurrence",), ("message passing",)),
    ),
    # A vision transformer is a transformer: the two are never each other's sibling.
    Group("architecture", (("vision transformer|vision transformers", "ViT|ViTs"), _CNN)),
    Group(
        "model family",
        (
            ("large language model|large language models", "LLM|LLMs", "language model|language models"),
            (
                "vision-language model|vision-language models",
                "VLM|VLMs",
                "LVLM|LVLMs",
                "multimodal large language model|multimodal large language models",
                "MLLM|MLLMs",
            ),
            ("speech recognition model|speech recognition models", "ASR model|ASR models"),
        ),
    ),
    Group(
        "model family",
        (
            ("diffusion model|diffusion models",),
            ("normalizing flow|normalizing flows",),
            ("variational autoencoder|variational autoencoders", "VAE|VAEs"),
            ("generative adversarial network|generative adversarial networks", "GAN|GANs"),
            ("energy-based model|energy-based models",),
        ),
    ),
    Group("model family", (("diffusion",), ("autoregressive",), ("energy-based",)), modifier=True),
    Group("learning setting", (("offline",), ("online",))),
    Group(
        "learning setting",
        (
            ("reinforcement learning", "RL"),
            ("imitation learning", "behavior cloning"),
            ("supervised learning",),
            ("contrastive learning",),
        ),
    ),
    Group("learning setting", (("generative",), ("discriminative",)), modifier=True),
    Group(
        "learning setting",
        (("supervised",), ("self-supervised",), ("unsupervised",), ("semi-supervised",), ("weakly supervised",)),
    ),
    Group("learning setting", (("single-agent",), ("multi-agent",))),
    Group("learning setting", (("federated",), ("centralized",))),
    Group("learning setting", (("zero-shot",), ("few-shot",))),
    Group("learning setting", (("on-policy",), ("off-policy",))),
    Group("learning setting", (("model-based",), ("model-free",))),
    Group("assumption", (("convex",), ("strongly convex",), ("non-convex", "nonconvex"))),
    Group("assumption", (("linear",), ("nonlinear", "non-linear")), modifier=True),
    Group("assumption", (("one-step", "single-step"), ("multi-step",))),
    Group("assumption", (("smooth",), ("non-smooth", "nonsmooth")), modifier=True),
    Group("assumption", (("stationary",), ("non-stationary", "nonstationary")), modifier=True),
    Group("assumption", (("deterministic",), ("stochastic",)), modifier=True),
    Group("assumption", (("first-order",), ("second-order",), ("zeroth-order",))),
    Group("assumption", (("discrete",), ("continuous",)), modifier=True),
    Group("assumption", (("heavy-tailed",), ("light-tailed", "sub-Gaussian"))),
    Group("assumption", (("homophilic",), ("heterophilic",))),
    Group("assumption", (("finite-width",), ("infinite-width",))),
    Group("assumption", (("black-box",), ("white-box",))),
    Group("assumption", (("sparse",), ("dense",)), modifier=True),
    Group("assumption", (("sequential",), ("parallel",)), modifier=True),
    Group("assumption", (("local",), ("global",)), modifier=True),
    Group("assumption", (("fixed",), ("adaptive",)), modifier=True),
    Group(
        "hardware", (("GPU|GPUs",), ("CPU|CPUs",), ("TPU|TPUs",), ("FPGA|FPGAs",), ("mobile device|mobile devices",))
    ),
    Group(
        "task",
        (
            ("classification",),
            ("regression",),
            ("clustering",),
            ("segmentation",),
            ("object detection",),
            ("machine translation",),
            ("summarization",),
            ("question answering",),
            ("coding", "code generation", "programming"),
        ),
    ),
    Group("number", tuple((size,) for size in ("1B", "3B", "7B", "8B", "13B", "14B", "32B", "70B", "72B"))),
    Group("number", tuple((f"{bits}-bit|{bits} bits",) for bits in (2, 3, 4, 8))),
)

_WORD = re.compile(r"[^\W_]+")
_ARTICLE = re.compile(r"\b(an?)(\s+)$", re.I)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


@dataclass(frozen=True)
class Token:
    stem: str
    start: int
    end: int


def tokens(text: str) -> list[Token]:
    """Every word of `text` (hyphens and punctuation split words), Snowball-stemmed, with its place."""
    found = list(_WORD.finditer(text))
    stemmed = _stemmer().stemWords([m.group(0).lower() for m in found])
    return [Token(s, m.start(), m.end()) for s, m in zip(stemmed, found, strict=True)]


def _stem_words(form: str) -> tuple[str, ...]:
    return tuple(t.stem for t in tokens(form))


@dataclass(frozen=True)
class Match:
    """A form of a group's class found in a text: tokens [first, last), characters [start, end)."""

    group: Group
    klass: int
    first: int
    last: int
    start: int
    end: int


def constraint_stems(question: str) -> set[str]:
    """The stems of the question's constraints: what a supporting abstract must hold (rag/query/analysis.py)."""
    return {t.stem for phrase in analyse(question).constraints for t in tokens(phrase)}


def _flat(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _occurrences(text: str, groups: Iterable[Group]) -> list[Match]:
    """Every place where `text` holds a form of a group, by stems ("videos", "Video" and "video" agree)."""
    words = tokens(text)
    stems = [t.stem for t in words]
    found = []
    for group in groups:
        for k, klass in enumerate(group.classes):
            for form in klass:
                for variant in set(form.split("|")):
                    pattern = _stem_words(variant)
                    for i in range(len(stems) - len(pattern) + 1):
                        if tuple(stems[i : i + len(pattern)]) == pattern:
                            last = i + len(pattern)
                            found.append(Match(group, k, i, last, words[i].start, words[last - 1].end))
    return found


def find(text: str, groups: Iterable[Group] = GROUPS) -> list[Match]:
    """The group forms a question writes as listed (not "visualization" for "visual"), a longer
    form hiding the shorter ones it covers ("strongly convex" is not "convex", "graph neural
    network" not "graph"), in the order of the text: what a twin may swap."""
    written = [
        m
        for m in _occurrences(text, groups)
        if _flat(text[m.start : m.end]) in {_flat(v) for form in m.group.classes[m.klass] for v in form.split("|")}
    ]
    kept: list[Match] = []
    for m in sorted(written, key=lambda m: (m.first - m.last, m.first)):
        if all(m.last <= o.first or o.last <= m.first for o in kept):
            kept.append(m)
    return sorted(kept, key=lambda m: m.first)


def mentioned(text: str, group: Group) -> set[int]:
    """The classes of `group` that `text` mentions anywhere, inside longer forms too: an abstract
    on "vision transformers" mentions transformers, one on "non-convex" losses mentions convexity.
    Generous on purpose: a sibling it counts as mentioned is never swapped in."""
    return {m.klass for m in _occurrences(text, [group])}


def _acronym(words: str) -> bool:
    return len(words) > 1 and words[:2].isupper()


def _surface(group: Group, klass: int, plural: bool, acronym: bool, joined: bool) -> str | None:
    """How class `klass` is written in place of words that were plural, an acronym, or joined by
    a hyphen to a neighbour (then only one word fits: "image-video model", not "image-point cloud
    model"). None: no form of the class fits there."""
    forms = group.classes[klass]
    ordered = [f for f in forms if _acronym(f) == acronym] + [f for f in forms if _acronym(f) != acronym]
    for form in ordered:
        singular, _, many = form.partition("|")
        written = many if plural and many else singular
        if not joined or re.fullmatch(r"[^\W_]+", written):
            return written
    return None


def _is_plural(group: Group, klass: int, written: str) -> bool:
    return any("|" in form and _flat(written) == _flat(form.partition("|")[2]) for form in group.classes[klass])


def _article(word: str) -> str:
    if _acronym(word):
        return "an" if word[0] in "AEFHILMNORSX" else "a"
    return "an" if word[0].lower() in "aeio" or word.lower().startswith(("un", "ul")) else "a"


def swap(question: str, match: Match, klass: int) -> tuple[str, str, str, int] | None:
    """The question with `match` replaced by class `klass` of its group: (twin, old words, new
    words, where the new words start), None where the class cannot be written there.
    Number, acronym and capital follow the words replaced; an "a"/"an" before them follows the new ones."""
    written = question[match.start : match.end]
    before, after = question[: match.start], question[match.end :]
    joined = before.endswith("-") or after.startswith("-")
    new = _surface(match.group, klass, _is_plural(match.group, match.klass, written), _acronym(written), joined)
    if new is None:
        return None
    if written[0].isupper() and not _acronym(written) and new[0].islower():
        new = new[0].upper() + new[1:]
    article = _ARTICLE.search(before)
    if article:
        chosen = _article(new)
        chosen = chosen.capitalize() if article.group(1)[0].isupper() else chosen
        before = before[: article.start()] + chosen + article.group(2)
    return before + new + after, written, new, len(before)


@dataclass
class Vocabulary:
    """The corpus seen by stems: each abstract's stem set, and which stems are distinctive."""

    papers: list[Paper]

    def __post_init__(self) -> None:
        self.stems = {p.paper_id: {t.stem for t in tokens(p.text)} for p in self.papers}
        frequency = Counter(s for stems in self.stems.values() for s in stems)
        limit = DISTINCTIVE_SHARE * len(self.papers)
        self.common = {s for s, n in frequency.items() if n > limit}

    def distinctive(self, question: str, skip: Match) -> set[str]:
        """The stems of the question's constraints, less the swapped words and the common ones."""
        inside = {t.stem for t in tokens(question[skip.start : skip.end])}
        return constraint_stems(question) - inside - self.common

    def share(self, question: str, match: Match, paper_id: str) -> float:
        """The share of the question's distinctive words (less the matched ones) the abstract holds."""
        words = self.distinctive(question, match)
        return len(words & self.stems[paper_id]) / len(words) if words else 0.0

    def supporters(self, twin: str, match: Match, bar: float = SUPPORT_SHARE) -> list[str]:
        """The abstracts that support a question: they mention the class `match` found in it
        and hold at least a `bar` share of its other distinctive words (one word at least)."""
        others = self.distinctive(twin, match)
        need = max(1.0, bar * len(others))
        return [
            p.paper_id
            for p in self.papers
            if match.klass in mentioned(p.text, match.group) and len(others & self.stems[p.paper_id]) >= need
        ]

    def twin_supporters(self, original: str, gold: str, twin: str, change: str) -> list[str]:
        """The abstracts that support a twin as well as its gold abstract supports the original,
        give or take RELATIVE_SHARE: a paraphrase-style question shares few words with any
        abstract, so its bar is lower. Empty: the twin is off-corpus."""
        label, _, words = change.partition(": ")
        old, _, new = words.partition(" -> ")
        member = next(m for m in find(original) if m.group.label == label and original[m.start : m.end] == old)
        sibling = next(m for m in find(twin) if m.group.label == label and twin[m.start : m.end] == new)
        bar = min(SUPPORT_SHARE, RELATIVE_SHARE * self.share(original, member, gold))
        return self.supporters(twin, sibling, bar)


def _sibling_order(key: str, count: int) -> list[int]:
    """The siblings in an order set by the question and the words swapped: spread, and the same every run."""
    offset = int(hashlib.sha256(key.encode()).hexdigest(), 16) % count
    return [(offset + i) % count for i in range(count)]


def _swappable(question: str, match: Match, names: Sequence[str]) -> bool:
    """A form that is a constraint of the question and stands on its own: not part of a name (a
    paper's, "Stochastic-D4RL", a capitalised "Contrastive Learning (LCL)" mid-sentence), not the
    tail of a fixed compound ("integer-programming"; "image-text" is two forms of a group) and,
    for a modifier, followed by the noun it qualifies ("in parallel" is not "parallel decoding")."""
    written = question[match.start : match.end]
    before, after = question[: match.start], question[match.end :]
    if not {t.stem for t in tokens(written)} <= constraint_stems(question):
        return False
    if any(name in question and written in name for name in names):
        return False
    if match.start > 0 and written[0].isupper() and not _acronym(written):
        return False
    if before.endswith("-"):
        head = re.sub(r"-(and|or)-$", "-", before)[:-1]
        if re.search(r"[A-Z0-9]", head.rsplit(None, 1)[-1]) or not any(
            m.end == len(head) for m in find(head, [match.group])
        ):
            return False
    if re.match(r"-\w*[A-Z0-9]", after):
        return False
    if match.group.modifier:
        follow = re.match(r"[\s-]+([^\W_]+)", after)
        if not follow or follow.group(1).lower() in _FUNCTION_WORDS:
            return False
    return True


_FUNCTION_WORDS = frozenset(
    "is are was were be been has have had does do did can could should would may might will and or but of in on "
    "for to with by from as at than that which who whom whose when where while if".split()
)


def twins_of(question: dict, corpus: Corpus, vocabulary: Vocabulary) -> list[dict]:
    """The twins of one dev question (at most TWINS_PER_QUESTION, each in another group)."""
    gold = corpus.by_id[question["gold"][0]]
    text = question["question"]
    names = [p.name for p in corpus.papers]
    made: list[dict] = []
    labels: set[str] = set()
    for match in find(text):
        group = match.group
        if group.label in labels or len(made) >= TWINS_PER_QUESTION:
            continue
        in_gold, in_question = mentioned(gold.text, group), mentioned(text, group)
        if match.klass not in in_gold or not _swappable(text, match, names):
            continue
        written = text[match.start : match.end]
        for klass in _sibling_order(f"{question['id']}|{written}", len(group.classes)):
            if klass == match.klass or klass in in_gold or klass in in_question:
                continue
            swapped = swap(text, match, klass)
            if swapped is None:
                continue
            twin, old, new, start = swapped
            spot = next((m for m in find(twin, [group]) if m.klass == klass and m.start == start), None)
            if spot is None:  # the new words join their neighbours into a longer form of the group
                continue
            if not {t.stem for t in tokens(new)} <= constraint_stems(twin):
                continue
            change = f"{group.label}: {old} -> {new}"
            if not vocabulary.distinctive(twin, spot) or vocabulary.twin_supporters(text, gold.paper_id, twin, change):
                continue
            made.append(
                {
                    "id": f"dc-{question['id']}-{group.label.replace(' ', '-')}",
                    "type": "unanswerable",
                    **({"intent": question["intent"]} if "intent" in question else {}),
                    "question": twin,
                    "history": question.get("history", []),
                    "gold": [],
                    "answer_keywords": [],
                    "contrast_of": f"dc-{question['id']}",
                    "change": change,
                }
            )
            labels.add(group.label)
            break
    return made


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# dev's labels of a question's words (eval/tagger.py's): not copied, since a twin swaps one of them.
LABELS = ("constraints", "framing")


def build(corpus: Corpus, dev: list[dict], paraphrases: list[dict]) -> list[dict]:
    """The file's records: each original used (id "dc-" + its dev id), its twins, then its paraphrases."""
    vocabulary = Vocabulary(corpus.papers)
    by_original: dict[str, list[dict]] = {}
    for p in paraphrases:
        by_original.setdefault(p["paraphrase_of"], []).append(p)
    out = []
    for q in dev:
        if q["type"] not in TYPES or len(q["gold"]) != 1:
            continue
        twins = twins_of(q, corpus, vocabulary)
        if not twins:
            continue
        asked = {k: v for k, v in q.items() if k not in LABELS}
        out.append({**asked, "id": f"dc-{q['id']}"})
        out.extend(twins)
        for p in by_original.pop(q["id"], []):
            out.append({**p, "id": f"dc-{p['id']}", "paraphrase_of": f"dc-{q['id']}"})
    if by_original:
        raise ValueError(f"paraphrases of questions that have no twin: {sorted(by_original)}")
    return out


def generate() -> list[dict]:
    return build(load_corpus(ROOT / "seeds"), _read(DEV), _read(PARAPHRASES))


def render(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def main() -> int:
    records = generate()
    OUT.write_text(render(records), encoding="utf-8")
    twins = [r for r in records if "contrast_of" in r]
    kinds = Counter(r["change"].split(":")[0] for r in twins)
    print(
        f"{OUT.relative_to(ROOT)}: {sum('contrast_of' not in r and 'paraphrase_of' not in r for r in records)} "
        f"originals, {len(twins)} twins, {sum('paraphrase_of' in r for r in records)} paraphrases"
    )
    for label, n in kinds.most_common():
        print(f"  {label:<18} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
