"""The HTTP service: FastAPI app, schemas and the chat page."""
