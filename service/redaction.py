"""What a database driver said, made fit to show a client (``/ping``, a 503's message, a
change stream's end) or a command's one line: never a password, nor a connection URL's
credentials. libpq's own messages do not hold the password, but some echo the connection
string they could not parse (``unexpected spaces found in "p w"``), and an error raised
around the driver may print a URL."""

from __future__ import annotations

import re

# A URL's user and password: ``scheme://USER:PASSWORD@`` up to the last ``@`` of the word
_URL_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.-]*://)\S*@", re.IGNORECASE)
# libpq's key=value form, and what a dict's repr shows: ``password=x``, ``'password': 'x'``
_PASSWORD_PARAMETER = re.compile(
    r"""(\b(?:password|passwd|pwd)['"]?\s*[=:]\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,}]+)""",
    re.IGNORECASE)
# Shorter passwords are masked by the rules above only: masking every "abc" of a message
# would make it unreadable (and a 3-character password is no secret from a guesser)
_SHORTEST_REMEMBERED = 4
_remembered: set[str] = set()

MASK = "***"


def remember_secret(secret: str) -> None:
    """Mask ``secret`` (a password the process was given: ``database_url.postgres_target``
    remembers every one it reads) wherever ``redacted`` meets it, from now on."""
    if len(secret) >= _SHORTEST_REMEMBERED:
        _remembered.add(secret)


def redacted(text: str) -> str:
    """``text`` with a URL's user and password (``postgresql://***@host/db``), a
    ``password=`` parameter's value and every remembered secret replaced by ``***``."""
    for secret in sorted(_remembered, key=len, reverse=True):  # a longer one holding another
        text = text.replace(secret, MASK)
    text = _URL_CREDENTIALS.sub(lambda found: found.group(1) + MASK + "@", text)
    return _PASSWORD_PARAMETER.sub(lambda found: found.group(1) + MASK, text)


def one_line(text: str, limit: int) -> str:
    """The first line of ``text`` that says something (a bullet's ``- `` taken off, runs of
    spaces made one: libpq writes ``FATAL:  database ...``), ``redacted``, and cut to
    ``limit`` characters (its end then ``…``); ``""`` if ``text`` has none."""
    line = next((said for said in (raw.strip().removeprefix("- ").strip()
                                   for raw in redacted(text).splitlines()) if said), "")
    line = redacted(" ".join(line.split()))  # again: a secret's spaces were made one
    return line if len(line) <= limit else line[:limit - 1] + "…"
