"""One router per resource; server/app.py mounts them."""
