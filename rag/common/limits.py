"""Limits on one request, named once for every way in that checks them (retrieval, the CLI, HTTP,
the OpenAI-compatible /v1, MCP), so that they agree and their error messages say the same number.
"""

MAX_K = 50
"""Papers one search or answer retrieves at most: every one costs a pass over its sentences."""

MAX_QUESTION_CHARS = 2000
"""Characters of a question or query (after trimming): longer text is a document, not a question."""

MAX_TURN_CHARS = 20_000
"""Characters of one earlier turn: room for a long answer with its list of sources."""

MAX_COMMENT_CHARS = 2000
"""Characters of a comment sent with a rating."""

MAX_HISTORY_TURNS = 20
"""Earlier turns one request hands over: all of them are read to tell a follow-up from a new question."""

MAX_SCOPE_PAPERS = 100
"""Papers one question or search may be scoped to (`paper_ids`): a scope is a few chosen papers;
for more, search them all."""
