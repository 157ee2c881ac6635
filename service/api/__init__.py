"""The HTTP API (FastAPI): routes per resource, schemas, errors mapped in one place."""
