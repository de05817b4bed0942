import re
from itertools import pairwise

import pytest

from rag.common.errors import QueryError

# Questions written from the abstracts; most avoid the paper's own name and rare words.
QUESTIONS = [
    ("rotary embeddings for vision transformers", "Spiral RoPE"),
    ("formalizing Euclidean geometry in Lean's Mathlib", "Euclean"),
    ("a model that seeks evidence in long surgical videos using tools", "MedScope"),
    ("training-free caching to accelerate diffusion language model inference", "dLLM-Cache"),
    ("turning an autoregressive LLM into a causal multi-token predictor", "Jacobi Forcing"),
    ("how robust are agents when their environment is noisy", "AgentNoiseBench"),
    ("question answering over medical sounds under clinical constraints", "MedMosaic"),
    ("low-bit post-training quantization of large vision-language models", "ImpQuant"),
    ("defending agent memory against extraction with decoys", "MemPot"),
    ("protein-protein interaction prediction with motifs at several scales", "MMM-PPI"),
    ("enforcing safety specifications when decoding robot navigation actions", "SafeDec"),
    ("an adaptive attack that erases LLM watermarks", "RLCracker"),
    ("lossless compression of clinical record token sequences", "MedTPE"),
    ("pruning the state dimension of Mamba2 with balanced truncation", "GHOST"),
    ("safety alignment for mixture-of-experts language models", "MESA"),
    ("predicting gene expression from histology across many cancer types", "MoLF"),
    ("Lion and Muon seen as Stochastic Frank-Wolfe", "Stochastic Frank-Wolfe is a classical"),
    ("why do loss spikes happen when training with Adam", "Loss spikes commonly"),
    ("how people talk about ChatGPT on Reddit over time", "ChatGPT was launched"),
    ("benchmark where coding agents build a whole repository from a requirements document", "NL2Repo-Bench"),
    ("768 competition problems", "Euclean"),
    ("dataset of tropical cyclones for testing vision foundation models", "Scientific Alignment"),
    ("converting ANNs to spiking networks with carried-over membrane potentials", "CRPI"),
    ("旋转位置编码如何扩展到视觉Transformer的多个方向？", "Spiral RoPE"),
    ("有没有关于医学音频问答数据集的论文？", "MedMosaic"),
]


@pytest.mark.parametrize("question, name", QUESTIONS)
def test_the_right_paper_is_in_the_top_5(retriever, question, name):
    names = [hit.paper.name for hit in retriever.search(question, 5).hits]
    assert any(n.startswith(name) for n in names), names


def test_results_are_one_row_per_paper_ranked_by_score(retriever):
    hits = retriever.search("diffusion language models", 50).hits
    assert len(hits) == len({h.paper.paper_id for h in hits}) >= 30
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.score >= b.score for a, b in pairwise(hits))
    for hit in hits:
        assert hit.snippet and hit.snippet in hit.paper.text


def test_questions_in_other_languages_go_through_the_multilingual_model(retriever):
    assert retriever.search("旋转位置编码", 3).multilingual
    assert retriever.search("Welche Arbeiten komprimieren den KV-Cache?", 3).multilingual
    assert not retriever.search("rotary position encoding", 3).multilingual
    assert not retriever.search("KV cache", 3).multilingual


@pytest.mark.parametrize("query, k", [("", 5), ("   ", 5), ("valid", 0), ("valid", 51)])
def test_bad_queries_raise_query_error(retriever, query, k):
    with pytest.raises(QueryError):
        retriever.search(query, k)


def test_papers_holding_a_term_are_found_under_an_alias_the_corpus_defines(retriever, corpus):
    """'Which papers ... VLMs?' ties the papers that write 'vision-language models' as well:
    one abstract defines 'Vision-language models (VLMs)'."""
    by_abbreviation = set(retriever.containing(["VLMs"], False, 20))
    by_long_form = set(retriever.containing(["vision-language models"], False, 20))
    assert by_long_form and by_long_form <= by_abbreviation
    # Some of them never write the abbreviation: found through the alias alone.
    assert any("VLM" not in corpus.get(pid).text for pid in by_abbreviation)


def test_papers_holding_a_version_of_a_named_model_family_are_found(retriever, corpus):
    """'Which papers ... Qwen models?' ties the papers that write only 'Qwen2.5' or 'Qwen3'."""
    found = set(retriever.containing(["Qwen"], False, 20))
    versions_only = [pid for pid in found if not re.search(r"\bQwen\b", corpus.get(pid).text)]
    assert versions_only and all(re.search(r"\bQwen\d", corpus.get(pid).text) for pid in versions_only)
    assert all("Qwen" in corpus.get(pid).text for pid in found)


def test_papers_holding_any_of_the_alternatives_asked_are_found(retriever, corpus):
    """'Which papers deal with spiking or binary neural networks?': a paper with either will do."""
    spiking = set(retriever.containing(["spiking"], False, 20))
    binary = set(retriever.containing(["binary neural networks"], False, 20))
    assert spiking and binary and spiking != binary
    both = ["spiking", "binary neural networks"]
    assert set(retriever.containing(both, False, 20, [both])) == spiking | binary
    assert set(retriever.containing(both, False, 20)) == spiking & binary
