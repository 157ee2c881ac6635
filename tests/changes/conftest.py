"""Services with owner and operator tokens, for the changefeed's scoping tests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from service.api.tokens import new_token
from service.container import Services
from service.settings import Settings
from tests.changes.scenarios import OWNER_A, OWNER_B


@pytest.fixture
def tokens() -> dict[str, str]:
    """Bearer tokens by name: ``operator``, ``owner_a``, ``owner_b``, ``agent``."""
    return {name: new_token()[0] for name in ("operator", "owner_a", "owner_b", "agent")}


@pytest.fixture
def tokened_services(settings: Settings, tokens: dict[str, str]) -> Iterator[Services]:
    """``services`` with ``tokens`` configured, and heartbeats every 10 ms (a stream that
    sends one has caught up with the head)."""
    import hashlib

    def digest(name: str) -> str:
        return hashlib.sha256(tokens[name].encode()).hexdigest()

    entries = [
        {"name": "operator", "role": "operator", "sha256": digest("operator")},
        {"name": "owner_a", "role": "owner", "owner_uuid": OWNER_A, "sha256": digest("owner_a")},
        {"name": "owner_b", "role": "owner", "owner_uuid": OWNER_B, "sha256": digest("owner_b")},
        {"name": "agent", "role": "agent", "server_uuid": OWNER_B, "sha256": digest("agent")},
    ]
    configured = settings.model_copy(update={"tokens": json.dumps(entries),
                                             "changes_heartbeat_s": 0.01})
    built = Services.build(configured)
    try:
        yield built
    finally:
        built.close()
