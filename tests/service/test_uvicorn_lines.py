"""uvicorn's lines through the service's logging (service/uvicorn_lines.py): its lines of each
WebSocket connection left out, and no URL query, credential header or bearer token in any
other. tests/changes/test_upgrade_logs.py checks a real server's log."""

from __future__ import annotations

import logging

from service.logs import setup_logging
from service.settings import Settings


def test_uvicorn_lines_of_each_websocket_are_left_out_and_none_carries_a_query_or_token(
        capsys) -> None:
    # a tester: every upgrade logged '"WebSocket /changefeeds?token=…" [accepted]'; the
    # envelope's vmledger.access line (path only) is each upgrade's line now
    setup_logging(Settings(log_format="text", log_level="debug"))
    error, access = logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn.access")
    # uvicorn sets their levels itself (to serve's): here, as a server a test ran left them
    levels = {logger: logger.level for logger in (error, access)}
    try:
        for logger in levels:
            logger.setLevel(logging.DEBUG)
        for outcome in ("[accepted]", "403", "%d"):
            error.info(f'%s - "WebSocket %s" {outcome}', "127.0.0.1:1", "/changefeeds?token=s3",
                       401)
        for line in ("connection open", "connection closed"):
            error.info(line)
        error.info("connection rejected (%d %s)", 401, "Unauthorized")
        # any other line of theirs: websockets' DEBUG trace of a handshake, an access line
        error.debug("< %s %s %s", "GET", "/changefeeds/?after=0&token=s3", "HTTP/1.1")
        error.debug("< %s: %s", "Authorization", "Bearer s3")
        error.debug("< %s: %s", "sec-websocket-protocol", "base64url.bearer.s3")
        error.debug("> %s: %s", "www-authenticate", 'Bearer realm="vmledger"')
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", "/changes?token=s3",
                    "1.1", 200)
        error.info("Started server process [%d]", 7)
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)
    lines = [line.split(" ", 2)[2] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "uvicorn.error: < GET /changefeeds/?*** HTTP/1.1",
        "uvicorn.error: < Authorization: ***",
        "uvicorn.error: < sec-websocket-protocol: ***",
        'uvicorn.error: > www-authenticate: Bearer realm="vmledger"',
        'uvicorn.access: 127.0.0.1:1 - "GET /changes?*** HTTP/1.1" 200',
        "uvicorn.error: Started server process [7]"]
    assert len(error.filters) == 1  # once, however often the logging is set up
