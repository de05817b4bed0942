"""Typed errors raised by the library; the CLI and the server turn them into messages."""


class RagError(Exception):
    """Base of every error this library raises on purpose."""

    code = "rag_error"


class ConfigError(RagError):
    """A RAG_* setting whose value cannot work: start-up stops with this one-line message."""

    code = "invalid_configuration"


class CorpusError(RagError):
    """A seed file or directory cannot be read as a corpus."""

    code = "corpus_error"


class IndexNotFoundError(RagError):
    """No usable index on disk."""

    code = "index_missing"


class IndexStaleError(RagError):
    """The index on disk was built from another corpus, model or chunking."""

    code = "index_stale"


class IndexCorruptError(RagError):
    """An index file is missing, truncated or does not match its checksum."""

    code = "index_corrupt"


class IndexWriteError(RagError):
    """The index (or a seed file) cannot be written: disk full, read-only, no permission."""

    code = "index_write_failed"


class StoreUnavailableError(RagError):
    """The vector store server (Milvus) cannot be reached or refused a request."""

    code = "store_unavailable"


class QueryError(RagError):
    """A question or search request that cannot be served as given."""

    code = "invalid_query"


class ScopeError(QueryError):
    """A scope of papers (`paper_ids`) that names none, or more than a question can be asked of."""

    code = "invalid_scope"


class GeneratorError(RagError):
    """The answer generator (an LLM endpoint) failed or returned garbage."""

    code = "generator_error"


class GeneratorTimeout(GeneratorError):
    code = "generator_timeout"


class FeedbackUnavailableError(RagError):
    """The feedback database cannot be reached or refused a write."""

    code = "feedback_unavailable"


class UnknownAnswerError(RagError):
    """A rating names an answer this service never gave, or one too old to rate."""

    code = "unknown_answer"


class PaperNotFoundError(RagError):
    """No paper of the index has this id (or these ids, all named in the message)."""

    code = "paper_not_found"
