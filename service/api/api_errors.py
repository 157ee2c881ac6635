"""The API layer's own errors (``ApiError`` and its kinds), each with its HTTP status and
code. ``service.api.errors`` maps them, with every other error, to their answers, and
re-exports them: import them from there.
"""

from __future__ import annotations

from typing import Any

from domain.json_input import cut
from service.api.job_messages import job_ended_message


class ApiError(Exception):
    """An error the API layer itself raises (not a domain refusal)."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.extra = extra


class UnauthorizedError(ApiError):
    """No bearer token, or one that matches no configured token (401)."""

    def __init__(self, message: str):
        super().__init__(401, "Unauthorized", message,
                         headers={"WWW-Authenticate": 'Bearer realm="vmledger"'})


class ForbiddenError(ApiError):
    """The caller's role is not allowed on the route, or an agent reports for another server
    (403)."""

    def __init__(self, message: str):
        super().__init__(403, "Forbidden", message)


class CrossSiteRequestError(ForbiddenError):
    """A browser sent a state-changing request for a page of another origin (403; ``why``
    names the header that says so: service/api/cross_site.py)."""

    def __init__(self, why: str):
        super().__init__(f"cross-site request refused: {why}")


class PayloadTooLargeError(ApiError):
    """The body is over the configured limit, ``max_bytes`` (413)."""

    def __init__(self, max_bytes: int):
        super().__init__(413, "PayloadTooLarge", f"body over {max_bytes} bytes")


class MalformedRequestError(ApiError):
    """A request the HTTP parser could not read, ``reason`` saying where (a method, request
    line, header or chunked body that is not HTTP/1.1): 400 ``BadRequest``, restify's code
    for it. Answered by the server's protocol before any route
    (service/api/http_protocol.py), so also to a method no route could have (not 405)."""

    def __init__(self, reason: str):
        super().__init__(400, "BadRequest", f"Invalid HTTP request: {reason}")


class BadDigestError(ApiError):
    """A body whose MD5 is not its ``Content-MD5``: 400 ``BadDigest``, restify's body
    reader's words (VMAPI), what was sent cut (``json_input.cut``)."""

    def __init__(self, sent: str, computed: str):
        super().__init__(400, "BadDigest", f"Content-MD5 '{cut(sent)}' didn't match '{computed}'")


class UnsupportedEncodingError(ApiError):
    """A body sent with a ``Content-Encoding`` other than ``identity`` (none is decoded):
    415 ``UnsupportedMediaType``, restify's code."""

    def __init__(self, encoding: str):
        super().__init__(415, "UnsupportedMediaType", f"Content-Encoding {cut(encoding)} is not "
                         "supported: send the body unencoded (identity)")


class UnavailableError(ApiError):
    """The database is unreachable, or a read timed out waiting for projections."""

    def __init__(self, message: str):
        super().__init__(503, "Unavailable", message)


class JobEndedBadlyError(ApiError):
    """A ``sync=true`` command whose job failed or was canceled: 409 ``JobFailed`` or
    ``JobCanceled`` with VMAPI's message (``job_ended_message``) and the ``vm_uuid`` and
    ``job_uuid`` the 202 would have given. VMAPI's ``waitForJob`` answers a plain Error, a
    500; here a 5xx other than 503 is a bug, and the job's end is the client's to read."""

    def __init__(self, job: dict[str, Any], headers: dict[str, str] | None = None):
        code = "JobCanceled" if job["execution"] == "canceled" else "JobFailed"
        super().__init__(409, code, job_ended_message(job), headers=headers,
                         vm_uuid=job["vm_uuid"], job_uuid=job["uuid"])
