"""Bearer tokens: who is calling (api.md, "Roles"; docs/operations.md, "Tokens and roles").

Tokens are configured in ``VMLEDGER_TOKENS_FILE`` or, as JSON, in ``VMLEDGER_TOKENS`` (one or
the other, never both: ``Settings`` refuses that): one entry per token with its ``name``,
``role``, ``owner_uuid`` (owner) or ``server_uuid`` (agent) and the token's SHA-256 (never the
token itself). A presented token is hashed and compared with every configured hash in constant
time (``hmac.compare_digest``). With no tokens configured the service runs in open local mode:
every caller is an ``operator`` named ``anonymous`` (and ``serve`` listens on loopback only).
What each role may call is ``service.api.auth``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import tomllib
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.api.errors import UnauthorizedError
from service.settings import Settings, not_utf8

OPERATOR, OWNER, AGENT, AUDITOR, ANALYST = "operator", "owner", "agent", "auditor", "analyst"
ROLES = (OPERATOR, OWNER, AGENT, AUDITOR, ANALYST)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name (the events' ``cause.actor``), its role, and what it is
    bound to (an owner's ``owner_uuid``, an agent's ``server_uuid``)."""

    name: str
    role: str
    owner_uuid: str | None = None
    server_uuid: str | None = None


OPEN = Principal("anonymous", OPERATOR)


class TokenFileError(ValueError):
    """The configured tokens (the file, or ``VMLEDGER_TOKENS``) cannot be used; the message
    names the source, the entry and the problem."""


@dataclass(frozen=True)
class _Token:
    digest: bytes
    principal: Principal


class Tokens:
    """The configured tokens (by SHA-256); empty means open local mode."""

    def __init__(self, entries: list[_Token]):
        self._entries = entries

    @property
    def open(self) -> bool:
        """No tokens configured: every caller is an anonymous operator."""
        return not self._entries

    @classmethod
    def from_settings(cls, settings: Settings) -> Tokens:
        """The tokens of ``VMLEDGER_TOKENS`` (JSON) or of ``VMLEDGER_TOKENS_FILE``; none
        configured is open local mode. Raises ``TokenFileError`` naming the source, the entry
        and the problem."""
        if settings.tokens is not None:
            return cls.from_json(settings.tokens, source="VMLEDGER_TOKENS")
        return cls.load(settings.tokens_file)

    @classmethod
    def load(cls, path: Path | None) -> Tokens:
        """Read a tokens file: TOML (``[[tokens]]`` tables) or, for a ``.json`` file, a JSON
        list of objects. Raises ``TokenFileError`` naming the bad entry."""
        if path is None:
            return cls([])
        source = f"tokens file {path}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise TokenFileError(f"{source}: {error}") from None
        except UnicodeDecodeError as error:  # TOML and JSON are UTF-8 text (a traceback once)
            raise TokenFileError(f"{source}: {not_utf8(error)}") from None
        if str(path).endswith(".json"):
            return cls.from_json(text, source=source)
        return cls.from_toml(text, source=source)

    @classmethod
    def from_toml(cls, text: str, *, source: str) -> Tokens:
        """Tokens from TOML text: ``[[tokens]]`` tables, as in a tokens file (and as
        ``vmledger token create`` checks the entry it prints). Raises ``TokenFileError``
        starting with ``source``."""
        try:
            entries = tomllib.loads(text).get("tokens", [])
        except ValueError as error:
            raise TokenFileError(f"{source}: {error}") from None
        return cls._build(entries, source, expected="[[tokens]] entries")

    @classmethod
    def from_json(cls, text: str, *, source: str) -> Tokens:
        """Tokens from JSON text: a list of entry objects (or ``{"tokens": [...]}``), as in a
        ``.json`` tokens file. Raises ``TokenFileError`` starting with ``source``."""
        if not text.strip():
            raise TokenFileError(f"{source}: is empty (unset it for open local mode, or give "
                                 "a JSON list of token entries)")
        try:
            raw = json.loads(text)
        except ValueError as error:
            raise TokenFileError(f"{source}: not valid JSON ({error}); expected a JSON list "
                                 "of token entries") from None
        entries = raw.get("tokens", []) if isinstance(raw, dict) else raw
        return cls._build(entries, source, expected="a JSON list of token entries")

    @classmethod
    def _build(cls, entries: Any, source: str, *, expected: str) -> Tokens:
        if not isinstance(entries, list) or not entries:
            raise TokenFileError(f"{source}: no tokens (expected {expected})")
        try:
            tokens = [_parse(entry, i) for i, entry in enumerate(entries)]
        except TokenFileError as error:
            raise TokenFileError(f"{source}: {error}") from None
        names = [t.principal.name for t in tokens]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TokenFileError(f"{source}: duplicate names {duplicates}")
        by_digest: dict[bytes, list[str]] = {}
        for token in tokens:
            by_digest.setdefault(token.digest, []).append(token.principal.name)
        for holders in by_digest.values():
            # one token, two entries: the last one compared would decide its role (a tester
            # found an operator's entry behind an analyst's, and serve starting silently)
            if len(holders) > 1:
                named = ", ".join(map(repr, holders[:-1])) + f" and {holders[-1]!r}"
                raise TokenFileError(f"{source}: duplicate sha256: tokens {named} have the "
                                     "same hash (each token needs an entry of its own)")
        return cls(tokens)

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer <token>`` header; raises
        ``UnauthorizedError`` when it is missing or matches no configured token."""
        if self.open:
            return OPEN
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise UnauthorizedError("a bearer token is required (Authorization: Bearer ...)")
        digest = hashlib.sha256(presented.strip().encode()).digest()
        found: Principal | None = None
        for entry in self._entries:  # every entry compared: time does not depend on which
            if hmac.compare_digest(digest, entry.digest):
                found = entry.principal
        if found is None:
            raise UnauthorizedError("unknown token")
        return found


def _parse(entry: Any, index: int) -> _Token:
    where = f"token #{index + 1}"
    if not isinstance(entry, dict):
        raise TokenFileError(f"{where}: must be a table/object")
    unknown = set(entry) - {"name", "role", "sha256", "owner_uuid", "server_uuid"}
    if unknown:
        raise TokenFileError(f"{where}: unknown fields {sorted(unknown)}")
    name, role, digest = entry.get("name"), entry.get("role"), entry.get("sha256")
    if not isinstance(name, str) or not name:
        raise TokenFileError(f"{where}: name is required")
    where = f"token {name!r}"
    if role not in ROLES:
        raise TokenFileError(f"{where}: role must be one of {', '.join(ROLES)}")
    try:
        raw = bytes.fromhex(digest) if isinstance(digest, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise TokenFileError(f"{where}: sha256 must be the token's SHA-256, 64 hex digits")
    bound = {"owner": "owner_uuid", "agent": "server_uuid"}.get(role)
    for field in ("owner_uuid", "server_uuid"):
        if field in entry and field != bound:
            raise TokenFileError(f"{where}: {field} is only for role "
                                 f"{'owner' if field == 'owner_uuid' else 'agent'}")
    values: dict[str, str] = {}
    if bound is not None:
        if entry.get(bound) is None:
            raise TokenFileError(f"{where}: {bound} (a UUID) is required for role {role}")
        try:
            values[bound] = str(uuidlib.UUID(str(entry[bound])))
        except ValueError:
            raise TokenFileError(f"{where}: {bound} is not a UUID") from None
    return _Token(raw, Principal(name, role, **values))


def new_token() -> tuple[str, str]:
    """A fresh random token and its SHA-256 (hex): the token goes to the caller, the hash to
    the tokens file."""
    token = secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()
