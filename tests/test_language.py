"""The language a question is written in (rag/query/language.py), with lingua's real models and
wordfreq's real lists: every language but English goes to the multilingual encoder."""

import json

import pytest

from rag.evaluation.runs import EVAL_DATA
from rag.query.language import ENGLISH, UNDETERMINED, language_of


@pytest.mark.parametrize(
    "question, language",
    [
        ("¿Qué papers proponen nuevos benchmarks para agentes de programación?", "es"),
        ("Welche Arbeiten komprimieren den KV-Cache?", "de"),
        ("Quel article propose un benchmark pour les agents?", "fr"),
        ("Quais artigos tratam de difusão para vídeo?", "pt"),
        ("Ci sono lavori sulla quantizzazione dei LLM?", "it"),
        ("Какие статьи про квантование LLM?", "ru"),
        ("有没有关于医学音频问答数据集的论文？", "zh"),
        ("医療音声の質問応答データセットに関する論文はありますか？", "ja"),
        ("의료 오디오 질의응답 데이터셋에 관한 논문이 있나요?", "ko"),
        # Half English terms, in another language's grammar or script.
        (
            "Nei modelli equivarianti per la novel view synthesis, cos'è il latent misalignment e come lo si corregge?",
            "it",
        ),
        ("Есть ли анализ adversarial training для Vision Transformers?", "ru"),
        ("क्या code-mixed टेक्स्ट पर sentiment analysis के लिए कोई paper है?", "hi"),
    ],
)
def test_a_question_in_another_language_is_told_apart(question, language):
    assert language_of(question) == language


@pytest.mark.parametrize(
    "question",
    [
        "What is RAMAC?",
        "TL;DR of dLLM-Cache?",
        "short version of SGShift?",
        "What is AgentNoiseBench?",
        "KV cache",
        "attention",
        "protein",
    ],
)
def test_short_english_questions_and_searches_stay_english(question):
    """Lingua's fast mode alone takes some of these for Dutch, French, German or Latin ("cache"
    and "attention" are French words too)."""
    assert language_of(question) == ENGLISH


def test_every_english_question_of_the_dev_side_is_english():
    questions = [
        json.loads(line)["question"]
        for split in ("dev", "dev_casual", "dev_paraphrases", "dev_overview", "dev_summaries", "dev_contrast")
        for line in (EVAL_DATA / f"{split}.jsonl").read_text().splitlines()
        if line.strip()
    ]
    latin = [q for q in questions if q.isascii()]
    assert len(latin) > 1000
    assert [q for q in latin if language_of(q) != ENGLISH] == []


def test_nothing_to_read_is_english_and_another_script_is_never_english():
    assert language_of("") == language_of("?? 42") == ENGLISH
    assert language_of("ภาษาไทย") not in (ENGLISH, "")  # a script none of its languages writes
    assert UNDETERMINED != ENGLISH
