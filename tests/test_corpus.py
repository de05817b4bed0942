import hashlib
import random

import pytest

from rag.common.errors import CorpusError
from rag.index.corpus import build_corpus, extract_code_url, load_corpus, paper_id_for, read_seed_file

from .conftest import SEEDS


def test_the_seeds_hold_86_papers_from_95_paragraphs(corpus):
    assert corpus.paragraphs == 95
    assert len(corpus) == 86
    assert len({p.paper_id for p in corpus.papers}) == 86


def test_the_nine_repeated_abstracts_list_both_sources(corpus):
    repeated = [p for p in corpus.papers if len(p.sources) > 1]
    assert len(repeated) == 9
    assert all(len(p.sources) == 2 and p.sources == sorted(p.sources) for p in repeated)
    assert sum(len(p.sources) for p in corpus.papers) == 95


def test_paper_id_is_sha256_of_the_normalised_text(corpus):
    for paper in corpus.papers:
        assert paper.paper_id == hashlib.sha256(paper.text.encode()).hexdigest()[:12]
        assert paper.text == " ".join(paper.text.split())
    assert paper_id_for("a  b\n c") == paper_id_for("a b c")


def test_ids_are_stable_across_loads_and_independent_of_file_order(corpus):
    again = load_corpus(SEEDS)
    files = [(f.name, read_seed_file(f)) for f in sorted(SEEDS.glob("*.txt"))]
    random.Random(7).shuffle(files)
    shuffled = build_corpus(files)
    assert [p.paper_id for p in again.papers] == [p.paper_id for p in corpus.papers]
    assert {p.paper_id: p.sources for p in shuffled.papers} == {p.paper_id: p.sources for p in corpus.papers}
    assert shuffled.content_hash == corpus.content_hash


def test_headers_are_dropped_whatever_their_language(corpus):
    texts = " ".join(p.text for p in corpus.papers)
    assert "ICML 2026 Papers" not in texts
    assert "论文列表" not in texts


# Hand-checked against the abstracts: the method, model, dataset or benchmark each introduces.
EXPECTED_NAMES = {
    "Spiral RoPE": "we propose Spiral RoPE",
    "Euclean": "We present Euclean",
    "MedScope": "we propose **MedScope**",
    "AgentNoiseBench": "we introduce AgentNoiseBench",
    "HAMC": "Multi-view Clustering (HAMC)",
    "Jacobi Forcing": "we introduce Jacobi Forcing",
    "PLANET": "we propose PLANET",
    "TSL": "Tensor Separation Learning (TSL)",
    "MedMosaic": "we present MedMosaic",
    "ProtDiS": "we introduce ProtDiS",
    "EEC": "Executable Exchange Contract (EEC)",
    "DiSC": "Distillation via Split Contexts (DiSC)",
    "ChaTSFM": "we propose ChaTSFM",
    "ImpQuant": "we present ImpQuant",
    "StableEdit": "we derive **StableEdit**",
    "OSC": "Orthogonal Subspace Carving (OSC)",
    "METIS": "we propose **METIS**",
    "MetaDNS": "Neural Sampler (MetaDNS)",
    "PolyFlow": "We propose PolyFlow",
    "AudioMosaic": "we introduce **AudioMosaic**",
    "DAISI": "we introduce DAISI",
    "PACE": "Environment Design (PACE)",
    "dLLM-Cache": "we propose dLLM-Cache",
    "RoVTL": "we propose RoVTL",
    "Deep Forcing": "we introduce Deep Forcing",
    "ChaosNexus": "we introduce ChaosNexus",
    "SPEED": "We introduce SPEED",
    "LSGQuant": "we introduce LSGQuant",
    "CRPI": "Potential Initialization (CRPI)",
    "MemPot": "we propose *MemPot*",
    "MMM-PPI": "we propose MMM-PPI",
    "GCPA": "Procrustes Alignment (GCPA)",
    "Residual Latent Flow": "we propose Residual Latent Flow",
    "RAMAC": "Actor-Critic (RAMAC)",
    "CDAL": "Anchor Learning (CDAL)",
    "PointCHR": "we propose PointCHR",
    "RAI": "Risk Awareness Injection (RAI)",
    "FedSSA": "Structural Alignment (FedSSA)",
    "LCL": "Contrastive Learning (LCL)",
    "NL2Repo-Bench": "we introduce NL2Repo-Bench",
    "SGShift": "we propose SGShift",
    "SafeDec": "introducing **SafeDec**",
    "PEM": "probabilistic elite membership (PEM)",
    "RACER": "a novel method -- RACER",
    "EpiTwin": "We propose EpiTwin",
    "TOP": "token order prediction (TOP)",
    "RECM": "Constraint Modulation (RECM)",
    "Ego3S": "three-stage Ego3S framework",
    "GeoCoupling": "we introduce GeoCoupling",
    "MedTPE": "Token-Pair Encoding (MedTPE)",
    "GHOST": "We introduce GHOST",
    "BiMU": "We propose BiMU",
    "MESA": "we propose MESA",
    "MoLF": "we introduce **MoLF**",
    "LoSA": "we propose LoSA",
    "DADP": "we propose DADP",
    "TextME": "We introduce TextME",
    "ProjQ": "\\textbf{ProjQ}",
}


def test_names_match_the_hand_checked_list(corpus):
    assert len(EXPECTED_NAMES) >= 30
    by_name = {}
    for paper in corpus.papers:
        by_name.setdefault(paper.name, []).append(paper)
    for name, evidence in EXPECTED_NAMES.items():
        assert name in by_name, f"no paper named {name!r}"
        assert len(by_name[name]) == 1, f"{name!r} names {len(by_name[name])} papers"
        assert evidence in by_name[name][0].text


def test_papers_without_a_named_method_get_their_opening_words(corpus):
    for paper in corpus.papers:
        assert 0 < len(paper.name) <= 90
        if paper.name.endswith("…"):
            assert paper.text.startswith(paper.name[:-1])


def test_code_urls_are_extracted_without_trailing_punctuation(corpus):
    by_name = {p.name: p for p in corpus.papers}
    assert by_name["Euclean"].code_url == "https://github.com/tlb-22/Euclean"
    assert by_name["dLLM-Cache"].code_url == "https://github.com/maomaocun/dLLM-cache"
    assert by_name["ProjQ"].code_url == "https://github.com/yy9301/ProjQ"
    assert by_name["Spiral RoPE"].code_url is None
    assert sum(p.code_url is not None for p in corpus.papers) >= 25
    assert extract_code_url("no link here.") is None


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"   \n\n  \n", "empty"),
        ("ICML 2026\n\nun r\xe9sum\xe9".encode("latin-1"), "not valid UTF-8"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00", "binary"),
        (("A long abstract without any header line. " * 10).encode(), "no header"),
        (b"ICML 2026 Papers\n\n   \n", "no abstracts"),
    ],
)
def test_malformed_files_give_an_error_naming_the_file(tmp_path, content, message):
    bad = tmp_path / "bad_file.txt"
    bad.write_bytes(content)
    with pytest.raises(CorpusError) as err:
        load_corpus(tmp_path)
    assert "bad_file.txt" in str(err.value)
    assert message in str(err.value)


def test_an_empty_or_missing_directory_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match="no seed files"):
        load_corpus(tmp_path)
    with pytest.raises(CorpusError, match="not a directory"):
        load_corpus(tmp_path / "nowhere")
