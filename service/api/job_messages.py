"""VMAPI's words for a job that ended badly, as a ``sync=true`` command's refusal says them
(``service.api.errors.JobEndedBadlyError``)."""

from __future__ import annotations

from typing import Any


def job_ended_message(job: dict[str, Any]) -> str:
    """VMAPI's message for a job that ended badly (``pollJob``'s ``_getErrorFromJob``,
    lib/common/util.js): its last chain result's error (that error's ``message`` when it
    has one, else ``job NAME (UUID) failed: RESULT: ERROR``); without one, ``Job NAME (UUID)
    failed`` or ``was canceled``."""
    results = job.get("chain_results") or []
    last = results[-1] if results else {}
    error, prefix = last.get("error"), f"{job['name']} ({job['uuid']})"
    if error:
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        return f"job {prefix} failed: {last.get('name')}: {error}"
    return f"Job {prefix} " + ("was canceled" if job["execution"] == "canceled" else "failed")
