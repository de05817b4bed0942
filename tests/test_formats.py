"""Corpora with metadata: JSON Lines, CSV, OpenReview's notes export and arXiv's records read
beside the seed format, with titles and authors kept, shown, searched and filtered by; what is
not an abstract, in any format, refused with the file and the row named."""

import csv
import io
import json

import httpx
import pytest
from playwright.sync_api import expect

from rag.common.errors import CorpusError
from rag.index.corpus import load_corpus, read_seed_bytes
from rag.index.formats import parse_file
from rag.index.stores.faiss import build_index

from .conftest import SEEDS, Server, ask, small_settings

ABSTRACTS = [p.text for p in load_corpus(SEEDS).papers[:8]]
# Invented titles and authors: the seeds have none.
TITLES = [
    "Orbits of Gradient Flow in Sparse Transformers",
    "A Ledger for Counterfactual Robot Demonstrations",
    "Quiet Tokens: Pruning the Residual Stream",
    "Lattice Priors for Protein Pockets",
    "Mirror Descent Meets Spectral Clipping",
    "Tidal Benchmarks for Tabular Agents",
    "Sparse Ballots in Federated Voting",
    "Anchored Decoding Without Regret",
]
AUTHORS = [["Ada Lovelace", "Alan Turing"], ["Grace Hopper"], ["Ada Lovelace"], ["Edsger Dijkstra"]] * 2


def metadata_corpus(folder):
    """One file of each format, eight papers, and a seed file repeating the first abstract."""
    folder.mkdir()
    (folder / "lab.jsonl").write_text(
        "\n".join(
            json.dumps({"id": f"lab-{i}", "title": TITLES[i], "abstract": ABSTRACTS[i], "authors": AUTHORS[i]})
            for i in (0, 1)
        )
    )
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["title", "abstract", "authors", "url"])
    for i in (2, 3):
        writer.writerow([TITLES[i], ABSTRACTS[i], "; ".join(AUTHORS[i]), f"https://example.org/{i}"])
    (folder / "sheet.csv").write_text(table.getvalue())
    notes = [
        {
            "id": f"note{i}",
            "forum": f"forum{i}",
            "content": {
                "title": {"value": TITLES[i]},
                "abstract": {"value": ABSTRACTS[i]},
                "authors": {"value": AUTHORS[i]},
            },
        }
        for i in (4, 5)
    ]
    (folder / "openreview.json").write_text(json.dumps({"notes": notes}))
    first, last = AUTHORS[6][0].split()
    arxiv = {
        "id": "2601.00006",
        "title": TITLES[6],
        "abstract": "  " + ABSTRACTS[6].replace(". ", ".\n"),
        "authors": AUTHORS[6][0],
        "authors_parsed": [[last, first, ""]],
        "categories": "cs.LG",
    }
    (folder / "arxiv.jsonl").write_text(json.dumps(arxiv) + "\n")
    (folder / "arxiv.xml").write_text(
        '<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>http://arxiv.org/abs/2601.00007v1</id>'
        f"<title>{TITLES[7]}</title><summary>{ABSTRACTS[7]}</summary>"
        + "".join(f"<author><name>{a}</name></author>" for a in AUTHORS[7])
        + "</entry></feed>"
    )
    (folder / "seed.txt").write_text(f"Seeds\n\n{ABSTRACTS[0]}\n")
    return folder


def test_every_format_gives_its_titles_authors_links_and_ids(tmp_path):
    corpus = load_corpus(metadata_corpus(tmp_path / "seeds"))
    assert len(corpus) == 8  # the repeated abstract is one paper, from both files
    by_title = {p.title: p for p in corpus.papers}
    assert set(by_title) == set(TITLES)
    first = by_title[TITLES[0]]
    assert first.sources == ["lab.jsonl", "seed.txt"] and first.ref == "lab-0"
    assert first.authors == AUTHORS[0] and first.display_name == TITLES[0]
    assert by_title[TITLES[2]].authors == AUTHORS[2] and by_title[TITLES[2]].url == "https://example.org/2"
    assert by_title[TITLES[4]].url == "https://openreview.net/forum?id=forum4" and by_title[TITLES[4]].ref == "note4"
    arxiv = by_title[TITLES[6]]
    assert arxiv.authors == ["Ada Lovelace"] and arxiv.url == "https://arxiv.org/abs/2601.00006"
    assert arxiv.text == ABSTRACTS[6]  # whitespace normalised: the same paper id as the seed's
    assert by_title[TITLES[7]].ref == "2601.00007v1" and by_title[TITLES[7]].authors == AUTHORS[7]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("a.jsonl", '{"title": "T"}\n', "a.jsonl: line 1: no abstract"),
        ("a.jsonl", '{"abstract": "x"}\n{"abstract": \n', "a.jsonl: line 2: not valid JSON"),
        ("a.jsonl", '{"abstarct": "x"}\n', "a.jsonl: line 1: unknown column 'abstarct'"),
        ("a.jsonl", '{"abstract": "x", "authors": 3}\n', "a.jsonl: line 1: authors must be"),
        ("a.jsonl", "[1, 2]\n", "a.jsonl: line 1: expected an object"),
        ("a.csv", "title,abstract,venue\nT,x,ICML\n", "a.csv: unknown column 'venue'"),
        ("a.csv", "title,authors\nT,A\n", "a.csv: no abstract column"),
        ("a.csv", 'title,abstract\nT,x\nU,"y",extra\n', "a.csv: row 3: 3 fields where the header has 2"),
        ("a.csv", "title,abstract\nT,\n", "a.csv: row 2: no abstract"),
        ("a.json", '{"notes": [{"content": {"title": {"value": "T"}}}]}', "a.json: record 1: no abstract"),
        ("a.json", "{not json", "a.json: not valid JSON"),
        ("a.xml", "<feed><entry>", "a.xml: not a valid Atom feed"),
        ("a.xml", '<!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>', "a.xml: not a valid Atom feed"),
        ("a.pdf", "%PDF", "a.pdf: unknown format .pdf"),
    ],
)
def test_each_formats_bad_input_names_the_file_and_row(name, content, message):
    with pytest.raises(CorpusError) as raised:
        parse_file(content.encode(), name)
    assert message in str(raised.value)


def test_what_is_not_an_abstract_is_refused_in_every_format(tmp_path):
    for name, content in [
        ("x.txt", "h\n\nabc"),
        ("x.jsonl", json.dumps({"abstract": "abc", "title": "A title alone"})),
        ("x.csv", "abstract\nabc\n"),
    ]:
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_text(content)
        with pytest.raises(CorpusError, match=rf"{name}: abstract 1 \('abc'\) has 1 word: not an abstract"):
            load_corpus(folder, min_words=30)


def test_a_file_too_large_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as f:
        f.truncate(2**30)  # 1 GiB, sparse: nothing is written
    with pytest.raises(CorpusError, match=r"huge.jsonl: 1024 MB, over the 512 MB .* split it"):
        read_seed_bytes(huge, 512 * 2**20)


def test_titles_and_authors_are_shown_searched_and_scope_answers(tmp_path, page):
    seeds = metadata_corpus(tmp_path / "seeds")
    settings = small_settings(tmp_path, seeds)
    build_index(load_corpus(seeds), settings)
    env = {"RAG_INDEX_DIR": str(settings.indexing.index_dir), "RAG_SEEDS_DIR": str(seeds), "RAG_MULTILINGUAL": "false"}
    server = Server(env, tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            papers = {p["title"]: p for p in client.get("/papers").json()["papers"]}
            assert set(papers) == set(TITLES)
            shown = papers[TITLES[3]]
            assert shown["name"] == TITLES[3] and shown["authors"] == AUTHORS[3]
            assert shown["url"] == "https://example.org/3"
            # Words of a title found nowhere in its abstract find the paper.
            found = client.post("/search", json={"query": "lattice priors pockets", "k": 1}).json()["results"]
            assert found[0]["paper_id"] == shown["paper_id"] and found[0]["name"] == TITLES[3]
            lovelace = {papers[TITLES[i]]["paper_id"] for i in range(8) if "Ada Lovelace" in AUTHORS[i]}
            scoped = client.post("/search", json={"query": "learning", "k": 10, "authors": ["lovelace"]}).json()
            assert {r["paper_id"] for r in scoped["results"]} == lovelace
            asked = client.post("/ask", json={"question": "What do these papers propose?", "authors": ["Ada Lovelace"]})
            assert asked.status_code == 200
            assert {c["paper_id"] for c in asked.json()["citations"]} <= lovelace
            # Questions about authors are answered from the metadata; a title names its paper in any case.
            who = client.post("/ask", json={"question": f"Who wrote {TITLES[1].lower()}?"}).json()
            assert who["confidence"] == "high" and "Grace Hopper" in who["answer"]
            assert [c["paper_id"] for c in who["citations"]] == [papers[TITLES[1]]["paper_id"]]
            by = client.post("/ask", json={"question": "Which papers are by Ada Lovelace?"}).json()
            assert {c["paper_id"] for c in by["citations"]} == lovelace and by["confidence"] == "high"
            chat = client.post(
                "/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "What do they propose?"}],
                    "metadata": {"authors": "Hopper"},
                },
            ).json()
            hopper = {papers[TITLES[i]]["paper_id"] for i in range(8) if "Grace Hopper" in AUTHORS[i]}
            assert chat["citations"] and {c["paper_id"] for c in chat["citations"]} <= hopper
            nobody = client.post("/ask", json={"question": "What is proposed?", "authors": ["Nobody Known"]})
            assert nobody.status_code == 404 and "no paper by 'Nobody Known'" in nobody.json()["error"]["message"]
            both = client.post(
                "/search", json={"query": "learning", "authors": ["Hopper"], "paper_ids": [shown["paper_id"]]}
            )
            assert both.status_code == 404  # Dijkstra's paper is not Hopper's
            added = client.post(
                "/papers",
                json={
                    "filename": "more.jsonl",
                    "content": json.dumps({"title": "Added With Metadata", "abstract": ABSTRACTS[0] + " Again."}),
                },
            )
            assert added.status_code == 201, added.text
            assert added.json()["added"][0]["name"] == "Added With Metadata"
            unnamed = next(p.text for p in load_corpus(SEEDS).papers if not p.named)
            derived = client.post("/papers", json={"filename": "more.txt", "content": f"More\n\n{unnamed}\n"})
            assert derived.status_code == 201 and not derived.json()["added"][0]["name"].endswith("…")
            refused = client.post("/papers", json={"filename": "x.txt", "content": "h\n\nabc"})
            assert refused.status_code == 400 and "not an abstract" in refused.json()["error"]["message"]
            assert len(client.get("/papers").json()["papers"]) == 10
        # The page shows the title as the paper's name and its authors beside it.
        page.goto(server.url + "/")
        answer = ask(page, f"Who wrote {TITLES[2]}?")
        expect(answer).to_contain_text("Ada Lovelace")
        answer.locator(".sources a").first.click()
        expect(page.locator("#source-name")).to_have_text(TITLES[2])
        expect(page.locator("#source-meta")).to_contain_text("Ada Lovelace")
    finally:
        server.stop()
