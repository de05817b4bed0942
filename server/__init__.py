"""The application on top of the `rag` library: the HTTP service (FastAPI app, schemas, the chat
page), the MCP server and the `rag` command."""
