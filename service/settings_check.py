"""What the settings accept, in words (``allowed``: docs/operations.md's "allowed" column is
checked against it, tests/service/test_settings_ranges.py), and the ``VMLEDGER_*`` environment
variables that are no setting (``unknown_variables``: a typo such as ``VMLEDGER_JOB_LEASES_S``
was silently ignored, the default used instead)."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping

from annotated_types import Ge, Gt, Le, Lt

from service.settings import MAX_SECONDS, Settings

PREFIX = "VMLEDGER_"

#: ``VMLEDGER_*`` variables that are ours but no setting: the tests', CI's and the benches'
#: (docs/operations.md, "Settings"). ``unknown_variables`` leaves them alone.
NOT_SETTINGS = frozenset({
    "VMLEDGER_TEST_POSTGRES_URL", "VMLEDGER_REQUIRE_POSTGRES", "VMLEDGER_TRACE",
    "VMLEDGER_REQUIRE_TRACE", "VMLEDGER_REQUIRE_BROWSER", "VMLEDGER_CHROMIUM",
    "VMLEDGER_CONSOLE_SCREENSHOTS", "VMLEDGER_SHARED", "VMLEDGER_TEST_CHILD_PID",
    "VMLEDGER_PORT", "VMLEDGER_PASS_PROBE",
})


def setting_names() -> list[str]:
    """Every setting's environment variable, ``VMLEDGER_DATABASE_URL`` first, in the
    model's order."""
    return [PREFIX + name.upper() for name in Settings.model_fields]


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``VMLEDGER_*`` names of ``environ`` (any case, as the settings read them) that are
    no setting and not in ``NOT_SETTINGS``, each with the setting whose name is closest
    (``difflib``, or None when none is close), in sorted order."""
    known = setting_names()
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if upper.startswith(PREFIX) and upper not in known and upper not in NOT_SETTINGS:
            close = difflib.get_close_matches(upper, known, n=1, cutoff=0.75)
            found.append((name, close[0] if close else None))
    return found


def _number(value: float) -> str:
    return f"{value:,}" if float(value) != int(value) else f"{int(value):,}"


def allowed(name: str) -> str:
    """What the setting ``name`` (a field of ``Settings``) accepts, in the words of
    docs/operations.md's "allowed" column: its bounds (``Field(gt=, ge=, le=)``; a duration,
    a ``*_s`` setting, is finite and at most ``MAX_SECONDS`` whatever its field says, and
    whole seconds when its type is ``int``), its choices, or ``—`` where the meaning column
    says what a value looks like."""
    field = Settings.model_fields[name]
    kind = field.annotation
    choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else ()
    if len(choices) == 1:
        return f"`{choices[0]}`"
    if choices:
        return ", ".join(f"`{c}`" for c in choices[:-1]) + f" or `{choices[-1]}`"
    if kind in (bool, bool | None):
        return "`true` or `false`"
    if kind not in (int, float):
        return "—"
    low = high = None
    above = False  # low itself excluded
    for bound in field.metadata:
        if isinstance(bound, Ge):
            low = bound.ge
        elif isinstance(bound, Gt):
            low, above = bound.gt, True
        elif isinstance(bound, Le):
            high = bound.le
        elif isinstance(bound, Lt):  # none so far: said as it is
            high = bound.lt
    duration = name.endswith("_s")
    if duration:
        high = MAX_SECONDS if high is None else min(high, MAX_SECONDS)
    if low is None:
        said = f"up to {_number(high)}" if high is not None else "any"
    elif high is None:
        said = f"more than {_number(low)}" if above else f"at least {_number(low)}"
    else:
        said = (f"more than {_number(low)}, up to {_number(high)}" if above
                else f"{_number(low)} to {_number(high)}")
    if duration:
        return ("whole seconds, " if kind is int else "seconds, ") + said
    return said


def warn_of_unknown_variables() -> None:
    """Log a warning for each ``unknown_variables`` of the environment and of ``.env`` (the
    settings read both), naming the setting it may have meant. A warning, not a refusal:
    the tests', CI's and other tools' variables share the prefix, and a variable the next
    version adds should not stop this one (docs/operations.md, "Settings")."""
    import logging
    import os

    log = logging.getLogger("vmledger.settings")
    for name, close in unknown_variables({**_dotenv(), **os.environ}):
        if close is None:
            log.warning('%s is not a setting and is ignored (docs/operations.md, "Settings", '
                        'lists them)', name)
        else:
            log.warning("%s is not a setting and is ignored; did you mean %s?", name, close)


def _dotenv() -> dict[str, str | None]:
    """The names ``.env`` in the working directory sets (none if it cannot be read: the
    settings say why)."""
    try:
        from dotenv import dotenv_values

        return dotenv_values(".env")
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
