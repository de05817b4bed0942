"""The language a question is written in: English questions are matched by MiniLM and BM25 and
judged by the English evidence; every other language goes to the multilingual encoder.

Lingua identifies it (its n-gram models ship in the wheel, so it works offline). Its low-accuracy
mode is the one that fits a service: 45 MB and 0.3 ms a question, against 500 MB for the full
models. Alone, it mistakes about 1 % of short English questions full of paper names for Dutch,
French or Latin ("What is RAMAC?"). So a question in Latin letters is taken for another language
only when its words are likelier in that language than in English, summed over its words (each
word's difference bounded, so that one word cannot decide), and one of them is a word English
never writes (wordfreq's Zipf frequencies, from its small lists: 3 MB a language where the full
ones take 37 MB). A question in another
script is identified by its words in that script, not by the English terms it keeps. The vote
is written by hand; no library offers it.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

from wordfreq import available_languages, zipf_frequency

ENGLISH = "en"
UNDETERMINED = "und"  # ISO 639's code for a language not identified: another script, not English
_LETTERS = re.compile(r"[^\W\d_]{2,}")
_LATIN_SHARE = 0.8  # of its letters in ASCII, for a question to be taken as written in Latin letters
_CANDIDATES = 3  # lingua's likeliest languages besides English that the words vote on
_MOST = 3.0  # a word's vote: its Zipf frequency in one language less the other's, at most this either way
_LOADING = threading.Lock()


@lru_cache(maxsize=1)
def _detector():
    """Lingua over every language wordfreq also knows (40: the vote needs their frequencies)."""
    from lingua import Language, LanguageDetectorBuilder

    known = set(available_languages())
    languages = [lang for lang in Language.all() if lang.iso_code_639_1.name.lower() in known]
    detector = LanguageDetectorBuilder.from_languages(*languages).with_low_accuracy_mode().build()
    detector.detect_language_of("warm up")  # its models load here, not on the first question
    return detector


def load() -> None:
    """Loads the identifier (about 1 s), before the service takes requests."""
    with _LOADING:
        _detector()


def _latin(text: str) -> bool:
    """Written in Latin letters all but a few (Russian or Hindi with English terms is not; the
    vowel signs of Devanagari are marks, not letters)."""
    letters = [c for c in text if unicodedata.category(c)[0] in "LM"]
    return sum(c.isascii() for c in letters) >= _LATIN_SHARE * len(letters)


@lru_cache(maxsize=4096)
def language_of(text: str) -> str:
    """The ISO 639-1 code of `text`'s language; English when unsure."""
    words = _LETTERS.findall(text)
    if not words:
        return ENGLISH
    load()
    if not _latin(text):
        # Its own script decides, not the English terms it keeps ("adversarial training для ViT").
        native = " ".join(word for word in words if not word.isascii())
        found = _detector().detect_language_of(native)
        return _code(found) if found is not None else UNDETERMINED
    # Lingua's likeliest languages besides English, each against English, word by word: the best
    # one that the words favour (lingua alone takes half-English Italian for English).
    lowered = [word.lower() for word in words]

    def frequency(word: str, code: str) -> float:
        return zipf_frequency(word, code, "small")

    def votes(code: str) -> float:
        return sum(max(-_MOST, min(_MOST, frequency(w, code) - frequency(w, ENGLISH))) for w in lowered)

    def own_word(code: str) -> bool:
        """Holds a word of that language that English never writes: "cache", "attention" or
        "protein" alone are English queries, whatever French or German say of them."""
        return any(frequency(w, code) > 0 and frequency(w, ENGLISH) == 0 for w in lowered)

    ranked = (_code(c.language) for c in _detector().compute_language_confidence_values(text))
    # CJK for Latin letters is a mistake, and wordfreq could not cut the words for a vote.
    others = [code for code in ranked if code not in (ENGLISH, "zh", "ja", "ko")][:_CANDIDATES]
    best = max(others, key=votes, default=ENGLISH)
    return best if best != ENGLISH and votes(best) > 0 and own_word(best) else ENGLISH


def _code(language) -> str:
    return language.iso_code_639_1.name.lower()
