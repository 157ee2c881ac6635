"""``vmledger token create``: a new bearer token, and its entry for the tokens file
(docs/operations.md, "Tokens and roles")."""

from __future__ import annotations

import uuid as uuidlib
from typing import Annotated

import typer

# TOML 1.0, "String": a basic string holds any character but '"', '\' and the control
# characters (U+0000-U+001F but tab, U+007F). Tab and C1 (U+0080-U+009F) are escaped too, so
# that an entry shows on a terminal as the text it is.
_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\",
            **{code: f"\\u{code:04x}" for code in (*range(0x20), *range(0x7F, 0xA0))}}


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string, quotes included: ``"`` and ``\\`` escaped, every
    control character as ``\\uXXXX``, anything else as itself."""
    return f'"{value.translate(_ESCAPES)}"'


def _canonical(value: str | None) -> str | None:
    # a uuid as the loader keeps it (lowercase, hyphenated); anything else as given, for the
    # loader to refuse in its own words
    try:
        return None if value is None else str(uuidlib.UUID(value))
    except ValueError:
        return value


def token_create(
    name: Annotated[str, typer.Option(help="the token's name (the events' cause.actor)")],
    role: Annotated[str, typer.Option(help="operator, owner, agent, auditor or analyst")],
    owner_uuid: Annotated[str | None, typer.Option(help="owner tokens: their owner")] = None,
    server_uuid: Annotated[str | None, typer.Option(help="agent tokens: their server")] = None,
) -> None:
    """Make a new random token: prints the token (give it to its holder; it is not stored)
    and, on stderr, the entry to append to VMLEDGER_TOKENS_FILE (its SHA-256 only). An entry
    the tokens file's loader would refuse is refused, in the loader's words (exit status 2)."""
    from service.api.tokens import TokenFileError, Tokens, new_token

    plain, digest = new_token()
    fields = {"name": name, "role": role, "owner_uuid": _canonical(owner_uuid),
              "server_uuid": _canonical(server_uuid), "sha256": digest}
    entry = "\n".join(["[[tokens]]", *(f"{field} = {toml_string(value)}"
                                       for field, value in fields.items() if value is not None)])
    try:
        entry.encode()  # a lone surrogate (undecodable bytes in argv): no file can hold it
    except UnicodeEncodeError:
        raise typer.BadParameter("must be text (it holds bytes that are not UTF-8)",
                                 param_hint="--name") from None
    try:
        # the printed text itself through the loader that every process runs at start-up:
        # its rules, and the escaping, checked in one place
        Tokens.from_toml(entry, source="the tokens file's loader would refuse this entry")
    except TokenFileError as error:
        raise typer.BadParameter(str(error)) from None
    typer.echo(plain)
    typer.echo(entry, err=True)
