"""The `rag` command: a thin layer that parses arguments, calls the library, prints results.

It lives beside the HTTP service and MCP, which it starts, so that `rag/` stays the library
alone. Heavy imports (torch, LlamaIndex) happen inside the commands so `rag --help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rag import __version__
from rag.common.errors import ConfigError, RagError
from rag.common.limits import MAX_K
from rag.common.settings import Settings, check_llm_titles, load_settings


def _bounded(name: str, low: int, high: int):
    """An argparse type for a whole number in [low, high]."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{name} must be between {low} and {high}")
        return number

    return parse


def _choices(name: str, allowed):
    """An argparse type for a comma-separated, non-empty subset of `allowed`."""

    def parse(value: str) -> list[str]:
        chosen = [s.strip() for s in value.split(",") if s.strip()]
        if not chosen or set(chosen) - set(allowed):
            raise argparse.ArgumentTypeError(f"{name} are a comma-separated subset of {','.join(allowed)}")
        return chosen

    return parse


def _paper_ids(value: str) -> list[str]:
    """`--paper`'s value: one paper id, or several separated by commas."""
    ids = [s.strip() for s in value.split(",") if s.strip()]
    if not ids:
        raise argparse.ArgumentTypeError("--paper takes a paper id (rag search prints them), or several with commas")
    return ids


def _scope(args) -> list[str] | None:
    """The ids of every --paper, in order (None without one: every paper, as without paper_ids)."""
    return [pid for ids in args.paper for pid in ids] if args.paper else None


_k = _bounded("k", 1, MAX_K)
_port = _bounded("port", 1, 65535)


def _titled(args, settings: Settings) -> Settings:
    """The settings with --titles applied, refused at once when it asks for an LLM and none is set."""
    if args.titles:
        settings = settings.model_copy(update={"titles": args.titles})
    check_llm_titles(settings)
    return settings


def cmd_index(args, settings: Settings) -> int:
    from rag.index.stores import index_seeds

    settings = _titled(args, settings)
    remote = None
    if args.ray is not None:
        from rag.index.ray_embedding import RayEmbedding

        remote = RayEmbedding(address=args.ray or None, workers=args.ray_workers)
    report = index_seeds(settings, show_progress=not args.quiet, only_if_stale=args.if_needed, remote=remote)
    if remote is not None and remote.done:
        print(remote.done)
    if report.titles is not None:
        print(report.titles)
    if report.build is None:
        print(f"index is up to date: {report.papers} papers ({settings.indexing.index_dir})")
        return 0
    if report.caught_up:
        print(
            f"caught up: {report.added} papers added, {report.removed} removed, {report.papers} in all, "
            f"in {report.seconds:.1f} s -> {report.build}"
        )
        return 0
    if args.if_needed:
        print(f"built the index: {report.reason}")
    print(f"indexed {report.papers} papers, {report.chunks} chunks in {report.seconds:.1f} s -> {report.build}")
    return 0


def _open_index(settings: Settings):
    """The last good build, with a note on stderr when the seed folder has moved on since."""
    from rag.index.stores import open_index, seeds_changed

    loaded = open_index(settings)
    if seeds_changed(settings, loaded):
        print(
            "rag: note: the seed folder changed since this index was built; answering from it as it is. "
            "Run `rag index --if-needed` to catch up.",
            file=sys.stderr,
        )
    return loaded


def _retriever(settings: Settings):
    from rag.retrieve.retrieval import Retriever

    return Retriever(_open_index(settings), settings)


def cmd_search(args, settings: Settings) -> int:
    result = _retriever(settings).within(_scope(args), args.author).search(args.query, args.k)
    if args.json:
        print(json.dumps({"results": [h.to_dict() for h in result.hits]}, ensure_ascii=False, indent=2))
        return 0
    for hit in result.hits:
        print(f"{hit.rank:>2}. {hit.paper.display_name}  [{hit.paper.paper_id}]  score {hit.score:.4f}")
        print(f"    {hit.snippet}")
        if hit.paper.code_url:
            print(f"    code: {hit.paper.code_url}")
    return 0


def cmd_ask(args, settings: Settings) -> int:
    from rag.assistant import Assistant, Done

    history = []
    for turn in args.history or []:
        role, _, content = turn.partition(":")
        if role not in ("user", "assistant") or not content.strip():
            raise RagError(f"--history takes ROLE:TEXT with ROLE user or assistant, got {turn!r}")
        history.append({"role": role, "content": content.strip()})
    assistant = Assistant(_open_index(settings), settings).within(_scope(args), args.author)
    for event in assistant.stream(args.question, history, args.k):
        if isinstance(event, Done):
            answer = event.answer
        elif args.stream and not args.json:
            print(event.text, end="", flush=True)
    if args.json:
        print(json.dumps(answer.to_dict(), ensure_ascii=False, indent=2))
        return 0
    print("" if args.stream else answer.text)
    print(f"\nConfidence: {answer.confidence}" + (f" (not found: {answer.missing})" if answer.missing else ""))
    if answer.citations:
        print("\nSources:")
        for c in answer.citations:
            print(f"  [{c.n}] {c.name} ({c.paper_id})")
    return 0


def cmd_add(args, settings: Settings) -> int:
    from rag.index.corpus import read_seed_bytes
    from rag.index.stores import add_seed_texts

    settings = _titled(args, settings)
    # Every file is parsed and checked before anything is written (a clear error naming it).
    items = [(path.name, read_seed_bytes(path, settings.indexing.max_file_bytes)) for path in args.files]
    started = time.perf_counter()
    result = add_seed_texts(settings, items)
    for paper in result.duplicates:
        print(f"already indexed: {paper.display_name} [{paper.paper_id}]")
    for paper in result.added:
        print(f"added: {paper.display_name} [{paper.paper_id}]")
    if result.titles is not None:
        print(result.titles)
    print(
        f"{len(result.added)} added, {len(result.duplicates)} already indexed, "
        f"{time.perf_counter() - started:.1f} s" + (f" -> {result.build}" if result.build else "")
    )
    return 0


def cmd_eval(args, settings: Settings) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RagError("rag eval draws its plot with matplotlib: pip install 'icml-rag[eval]'") from None
    from rag.evaluation.report import below_floors, columns, write_report
    from rag.evaluation.runs import HEADLINE, LOO_SPLIT, SPLITS, evaluate, leave_one_out, load_questions
    from rag.index.corpus import load_corpus

    if args.generator:
        settings = settings.model_copy(update={"generator": args.generator})
    corpus = load_corpus(settings.indexing.seeds_dir)
    files = {path.stem: path for path in args.questions} if args.questions else {s: SPLITS[s] for s in args.split}
    splits = {name: load_questions(path, corpus) for name, path in files.items()}
    if args.leave_one_out:
        if "dev" not in splits:
            raise RagError("--leave-one-out hides the papers of dev questions: include the dev split")
        splits[LOO_SPLIT] = leave_one_out(splits["dev"])
    report = evaluate(settings, splits, args.systems, progress=True)
    out = write_report(report, args.out)
    cols = columns(report)
    width = max(12, *(len(f"{a}:{b}") + 2 for a, b in cols))
    print(f"{'metric':<34}" + "".join(f"{f'{a}:{b}':>{width}}" for a, b in cols))
    for key, label in HEADLINE.items():
        values = [report["splits"][a]["systems"][b]["overall"][key] for a, b in cols]
        print(f"{label:<34}" + "".join(f"{'-' if v is None else f'{v:.3f}':>{width}}" for v in values))
    print_by_intent(report, cols)
    sizes = ", ".join(f"{name} {len(qs)}" for name, qs in splits.items())
    print(f"questions: {sizes}; {len(args.systems)} systems in {report['seconds']} s -> {out}/report.md")
    if args.check:
        problems = below_floors(report, args.check)
        for problem in problems:
            print(f"below floor: {problem}", file=sys.stderr)
        return 1 if problems else 0
    return 0


def print_by_intent(report: dict, cols: list[tuple[str, str]]) -> None:
    """Per intent and column: keyword accuracy / named papers all cited / answer of the asked shape (questions)."""
    from rag.query.analysis import INTENTS

    def cell(figures: dict | None) -> str:
        if not figures:
            return "-"
        shown = (figures[k] for k in ("keyword_accuracy", "named_cited", "shape_ok"))
        return "/".join("-" if v is None else f"{v:.2f}" for v in shown) + f" ({figures['questions']})"

    width = 22
    print(f"\n{'by intent: keywords/named cited/shape':<38}" + "".join(f"{f'{a}:{b}':>{width}}" for a, b in cols))
    for intent in INTENTS:
        cells = [cell(report["splits"][a]["systems"][b].get("by_intent", {}).get(intent)) for a, b in cols]
        if any(c != "-" for c in cells):
            print(f"{intent:<38}" + "".join(f"{c:>{width}}" for c in cells))


def cmd_serve(args, settings: Settings) -> int:
    import uvicorn

    from .logs import configure_logging, logging_config

    # The port opens at once: each worker serves the last good build and catches up with the
    # seed folder (or builds a first index) in the background.
    # Workers read their settings from the environment: hand them the folders named here.
    os.environ["RAG_SEEDS_DIR"] = str(Path(settings.indexing.seeds_dir).resolve())
    os.environ["RAG_INDEX_DIR"] = str(Path(settings.indexing.index_dir).resolve())
    if args.workers > 1:
        # Workers share the cores: two torch threads per worker would oversubscribe them
        # (bench: /search under 16 connections, 2 workers, 52.6 -> 65.2 req/s with one thread).
        share = str(max(1, (os.cpu_count() or 1) // args.workers))
        os.environ.setdefault("OMP_NUM_THREADS", share)
        # onnxruntime's threads for a question likewise (2 workers under wrk on 2 cores: one each).
        if settings.indexing.question_threads is None:
            os.environ["RAG_QUESTION_THREADS"] = share
    configure_logging(settings.service.log_format, settings.service.library_log_level)  # this process's warnings too
    uvicorn.run(
        "server.app:create_app",
        factory=True,
        host=args.host or settings.service.host,
        port=args.port or settings.service.port,
        workers=args.workers,
        # Every line on stderr as server/logs.py writes it, in this process and in each worker.
        log_config=logging_config(settings.service.log_format, settings.service.library_log_level),
        log_level="info",
        access_log=False,  # the service logs each request itself, as JSON with its request id
    )
    return 0


def cmd_mcp(args, settings: Settings) -> int:
    from rag.assistant import Assistant

    from .logs import claim_handlers, configure_logging
    from .mcp_server import build_mcp

    # stdout carries the protocol: the note about the seed folder and any log go to stderr.
    configure_logging(settings.service.log_format, settings.service.library_log_level)
    assistant = Assistant(_open_index(settings), settings)
    server = build_mcp(lambda: assistant)
    claim_handlers()  # should the SDK have set up logging of its own
    server.run("stdio")
    return 0


def cmd_feedback(args, settings: Settings) -> int:
    from rag.feedback import FeedbackStore, as_questions, summary

    ratings = FeedbackStore(settings).rated(getattr(args, "rating", None))
    if args.action == "stats":
        print(json.dumps(summary(ratings), indent=2))
        return 0
    lines = list(as_questions(ratings))
    if args.out is None:
        for line in lines:
            print(line)
    else:
        args.out.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        print(f"{len(lines)} rated answers -> {args.out} (review them into eval/data/dev.jsonl)", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag", description="Question answering over the ICML 2026 abstracts.")
    parser.add_argument("--version", action="version", version=f"rag {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--seeds", type=Path, default=None, metavar="DIR", help="the seed folder (default: RAG_SEEDS_DIR, else ./seeds)"
    )
    where.add_argument(
        "--index-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the index folder (default: RAG_INDEX_DIR, else ./index)",
    )

    titling = argparse.ArgumentParser(add_help=False)
    titling.add_argument(
        "--titles",
        choices=["derived", "llm"],
        default=None,
        help="titles of unnamed papers: derived from the abstract, or written by the LLM endpoint (RAG_LLM_BASE_URL) "
        "and kept when grounded in the abstract (default: RAG_TITLES, else derived)",
    )

    within = argparse.ArgumentParser(add_help=False)
    within.add_argument(
        "--paper",
        type=_paper_ids,
        action="append",
        metavar="ID",
        help="only this paper (repeatable, or ids separated by commas), as paper_ids on /search and /ask",
    )
    within.add_argument(
        "--author",
        action="append",
        metavar="NAME",
        help="only papers by this author (repeatable; whole words of a name), as authors on /search and /ask",
    )

    index = sub.add_parser("index", parents=[where, titling], help="build or rebuild the index from the seed files")
    index.add_argument(
        "--if-needed",
        action="store_true",
        help="only what changed in the seed folder; everything when the index is missing, damaged or built "
        "with another model or chunking",
    )
    index.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    index.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="embed on Ray Data: the cluster at ADDRESS (host:port), or a local Ray without one",
    )
    index.add_argument(
        "--ray-workers",
        type=_bounded("ray workers", 1, 1024),
        default=None,
        metavar="N",
        help="embedding actors (default: half the cluster's CPUs)",
    )
    index.set_defaults(run=cmd_index)

    search = sub.add_parser("search", parents=[where, within], help="the papers that best match a query")
    search.add_argument("query")
    search.add_argument("-k", type=_k, default=None, help=f"number of papers (1-{MAX_K})")
    search.add_argument("--json", action="store_true", help="print the /search JSON")
    search.set_defaults(run=cmd_search)

    ask = sub.add_parser("ask", parents=[where, within], help="answer a question with citations")
    ask.add_argument("question")
    ask.add_argument("-k", type=_k, default=None, help=f"papers to retrieve (1-{MAX_K})")
    ask.add_argument(
        "--history",
        action="append",
        metavar="ROLE:TEXT",
        help="an earlier turn, e.g. --history 'user:How does Jacobi Forcing work?'",
    )
    ask.add_argument("--json", action="store_true", help="print the /ask JSON")
    ask.add_argument("--stream", action="store_true", help="print the answer as it is produced")
    ask.set_defaults(run=cmd_ask)

    add = sub.add_parser(
        "add",
        parents=[where, titling],
        help="add the papers of corpus files (seed format, JSON Lines, CSV, OpenReview, arXiv) without a full rebuild",
    )
    add.add_argument("files", nargs="+", type=Path, metavar="FILE")
    add.set_defaults(run=cmd_add)

    from rag.evaluation.runs import DEFAULT_REPORTS, SPLITS, SYSTEMS

    evaluate = sub.add_parser(
        "eval", parents=[where], help="measure answer quality on the gold questions (dev, test, test2)"
    )
    evaluate.add_argument(
        "--split",
        type=_choices("splits", SPLITS),
        default=list(SPLITS),
        help=f"comma-separated subset of {','.join(SPLITS)} (tune on dev; the others are held out, only reported)",
    )
    evaluate.add_argument(
        "--questions",
        type=Path,
        action="append",
        metavar="FILE",
        help="a questions .jsonl file instead of the splits (repeatable; named by file stem)",
    )
    evaluate.add_argument(
        "--leave-one-out",
        action="store_true",
        help="also ask each one-paper dev question with its paper hidden (should abstain)",
    )
    evaluate.add_argument(
        "--generator", choices=["extractive", "llm"], default=None, help="default: RAG_GENERATOR (auto)"
    )
    evaluate.add_argument(
        "--systems",
        type=_choices("systems", SYSTEMS),
        default=list(SYSTEMS),
        help="comma-separated subset of bm25,dense,hybrid",
    )
    evaluate.add_argument("--out", type=Path, default=DEFAULT_REPORTS, help="reports folder")
    evaluate.add_argument(
        "--check",
        type=Path,
        metavar="THRESHOLDS",
        default=None,
        help="exit 1 when a figure is under its floor in this TOML file",
    )
    evaluate.set_defaults(run=cmd_eval)

    serve = sub.add_parser(
        "serve", parents=[where], help="start the HTTP service (catches the index up in the background)"
    )
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=_port, default=None)
    serve.add_argument("--workers", type=_bounded("workers", 1, 64), default=1)
    serve.set_defaults(run=cmd_serve)

    mcp = sub.add_parser("mcp", parents=[where], help="serve search, answers and papers to agents over MCP (stdio)")
    mcp.set_defaults(run=cmd_mcp)

    feedback = sub.add_parser("feedback", parents=[where], help="the ratings of answers (RAG_FEEDBACK_DB)")
    actions = feedback.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="rated answers as JSONL in the dev split's question format")
    export.add_argument("--rating", choices=["up", "down"], default=None, help="only these ratings")
    export.add_argument("--out", type=Path, default=None, metavar="FILE", help="write here instead of stdout")
    actions.add_parser("stats", help="counts by rating and by the rated answers' confidence")
    feedback.set_defaults(run=cmd_feedback)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    locations = {"seeds_dir": args.seeds, "index_dir": args.index_dir}
    try:
        settings = load_settings(**{key: value for key, value in locations.items() if value is not None})
    except ConfigError as exc:
        if args.command == "serve":  # a service's stderr is read by a log collector: one record
            from .logs import fatal

            fatal(str(exc))
        else:
            print(f"rag: {exc}", file=sys.stderr)
        return 2
    try:
        return args.run(args, settings)
    except RagError as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
