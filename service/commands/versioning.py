"""API versions, and the one place where their behaviours differ (api.md, "Versioning" and
"DeleteVm and actions: version 1 vs version 2").

Version 1 is VMAPI's behaviour and never changes (Triton ZAPI-685/ZAPI-782: changing DeleteVm
broke clients twice). Version 2 is the improved behaviour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from enum import StrEnum

from domain import rules
from domain.errors import InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError
from domain.rules import Verdict
from domain.states import Action, VmState

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0.0", "2.0.0")
# The version real VMAPI servers advertise; ``sdc-clients`` constructed with a version sends a
# range over it (``~9``). Such a range is served version 1, VMAPI's behaviour (api.md).
VMAPI_VERSION = "9.16.0"


class InvalidVersionError(Exception):
    """No supported version satisfies the ``Accept-Version`` range."""

    def __init__(self, requested: str):
        super().__init__(
            f"No supported version satisfies '{requested}'; supported: "
            + ", ".join(SUPPORTED_VERSIONS)
        )
        self.requested = requested
        self.supported = list(SUPPORTED_VERSIONS)


OLDEST_VERSION = SUPPORTED_VERSIONS[0]


def _parse(version: str) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in version.split("."))
    return major, minor, patch


_PART = r"(\d+|x|X|\*)"
# "~>" is node-semver's "~" (its LONETILDE, ``~>?``): Ruby's pessimistic operator
_RANGE = re.compile(
    rf"^\s*(~>|~|\^|>=|<=|>|<|=|v)?\s*v?{_PART}(?:\.{_PART}(?:\.{_PART})?)?\s*$")
_ANY = ("*", "x", "X", "")


# More than any part of a version we serve or VMAPI's: what a part of more digits reads as.
_BEYOND_ANY_PART = 10**18


def _number(digits: str) -> int:
    """A range's part as a number; one of more than 18 digits (leading zeros aside) compares
    above every version we know, where ``int`` would refuse it past 4,300 digits."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= 18 else _BEYOND_ANY_PART


def _term(term: str) -> tuple[str, list[str | None]] | None:
    """One comparator as (operator, [major, minor, patch]), a part None where it is not
    given; an empty one and ``*`` as the wildcard major; None when it is not a comparator."""
    if term.strip() in _ANY:
        return "", ["*", None, None]
    match = _RANGE.match(term)
    if not match:
        return None
    operator, *parts = match.groups()
    return ("~" if operator == "~>" else operator), parts


def _satisfies(version: str, requested: str) -> bool:
    """Whether ``version`` satisfies one semver range term (``1``, ``~1``, ``1.0.0``,
    ``~2``, ``2.x``, ``^2.0``, ``*``)."""
    term = _term(requested)
    if term is None:
        return False
    operator, parts = term
    have = _parse(version)
    wanted = [None if p in (None, "x", "X", "*") else _number(p) for p in parts]
    major, minor, patch = wanted
    if major is None:
        return operator not in (">", "<")  # node-semver: ">*" and "<*" admit nothing
    if operator == "~":
        # ~1 = 1.x; ~1.2 = 1.2.x; ~1.2.3 = >=1.2.3 <1.3.0
        if have[0] != major or (minor is not None and have[1] != minor):
            return False
        return patch is None or have[2] >= patch
    if operator == "^":
        return have[0] == major and have >= (major, minor or 0, patch or 0)
    if operator in (">=", ">", "<=", "<"):
        return _compare(have, operator, major, minor, patch)
    # a plain version or x-range: every given part must match
    return all(w is None or w == h for w, h in zip(wanted, have, strict=True))


def _compare(have: tuple[int, int, int], operator: str, major: int, minor: int | None,
             patch: int | None) -> bool:
    """``>=1``, ``>1.2``, ``<2``, ``<=2.0``: a partial version compares as its range would
    (``>1`` is ``>=2.0.0``, ``<=2`` is ``<3.0.0``)."""
    given = [p for p in (major, minor, patch) if p is not None]
    prefix = tuple(have[: len(given)])
    wanted = tuple(given)
    return {">=": prefix >= wanted, ">": prefix > wanted,
            "<=": prefix <= wanted, "<": prefix < wanted}[operator]


# Clients send the same few headers on every request; parsing one costs more than its answer.
@lru_cache(maxsize=256)
def negotiate(accept_version: str | None) -> str:
    """The version served for ``accept_version`` (``||``-separated ranges allowed), api.md
    "Versioning": no header, ``*`` and every range node-semver reads as ``*`` (``x.x.x``,
    ``>=0``, ``1 ||``: ``_admits_any``) mean version 1 (what VMAPI's clients and tests were
    written against); otherwise the newest supported version the range admits; a range that
    admits none of ours but admits VMAPI's own version (``~9``, ``9.x``) is served version 1.
    Raises ``InvalidVersionError`` (not remembered: a bad header is parsed each time).
    Answers are remembered for the last 256 distinct headers."""
    if accept_version is None:
        return OLDEST_VERSION
    alternatives = [_comparators(term) for term in accept_version.split("||")]
    if any(all(_admits_any(term) for term in terms) for terms in alternatives):
        return OLDEST_VERSION

    def admitted(version: str) -> bool:
        return any(all(_satisfies(version, term) for term in terms) for terms in alternatives)

    for version in sorted(SUPPORTED_VERSIONS, key=_parse, reverse=True):
        if admitted(version):
            return version
    if admitted(VMAPI_VERSION):
        return OLDEST_VERSION
    raise InvalidVersionError(accept_version)


def _admits_any(term: str) -> bool:
    """Whether one comparator is node-semver's "any version", which it rewrites to ``*``: an
    empty one, a wildcard major with any operator but ``>`` and ``<`` (``x.x.x``, ``~x``,
    ``>=*``, ``x.1.2``: parts after a wildcard are ignored), and ``>=0`` (``>=0.0.0``,
    ``>=0.x``; its ``replaceGTE0``). An alternative all of whose comparators are "any" makes
    the whole range ``*``, which is version 1 (api.md "Contract: versions"); a wildcard
    AND-ed with another comparator is that comparator (``2 x`` is ``2``)."""
    parsed = _term(term)
    if parsed is None:
        return False
    operator, parts = parsed
    if parts[0] in _ANY:
        return operator not in (">", "<")
    if operator != ">=":
        return False
    numbers = [p for p in parts if p is not None and p not in _ANY]
    return all(_number(p) == 0 for p in numbers)


def _comparators(alternative: str) -> list[str]:
    """One ``||`` alternative as its comparators, each of which must hold: node-semver's
    set, joined by spaces (``>=1 <2``; ``>= 1`` is one comparator)."""
    joined = re.sub(r"(~|\^|>=|<=|>|<|=)\s+", r"\1", alternative.strip())
    return joined.split() or [""]


class IfAlready(StrEnum):
    """What a job does when, at its ticket, its target state already holds."""

    FAIL = "fail"  # v1 without idempotent=true: "Cannot stop a VM from a 'stopped' state"
    SUCCEED = "succeed"  # v2, or idempotent=true: succeed doing nothing


@dataclass(frozen=True)
class JobPlan:
    """How an admitted action is queued."""

    if_already: IfAlready
    cancel_queued_provision: bool = False
    destroy_now: bool = False  # no job: record the VM destroyed at once


@dataclass(frozen=True)
class Behaviour:
    """The behaviour of one API version."""

    version: str

    @property
    def major(self) -> int:
        return _parse(self.version)[0]

    def admit(
        self, state: VmState, action: Action, *, vm_uuid: str, idempotent: bool = False,
        server_removed: bool = False, has_server: bool = True, placed: bool = False,
    ) -> JobPlan:
        """Decide whether ``action`` on a VM in ``state`` queues a job, and how.

        ``server_removed``: the VM's server was removed from the fleet; version 2 destroys
        such a VM at once (204, no job), version 1 queues a destroy job that fails there.
        ``has_server``: whether the VM is on a server; version 1 refuses to delete a running
        or stopped VM on none (VMAPI: "Cannot delete a VM with no server_uuid": one an agent
        reported with ``server_uuid: null``). A failed VM is deleted as the table says. An
        action carried out on the VM's server (start, stop, kill, reboot) of a VM on none is
        ``UnallocatedVmError`` in version 1 and ``InvalidTransitionError`` in version 2
        (``Verdict.UNALLOCATED``).
        ``placed``: the VM object shows a server (``Vm.shown_server_uuid``), though the VM is
        not on it yet: a provisioning VM whose provision claimed one. Version 1 deletes such
        a VM as VMAPI does, whose deleteVm refuses only a VM with no ``server_uuid`` and
        whose createVm gives a provisioning VM its server at once (sdc-vmapi
        ``lib/endpoints/vms.js``): with version 2's destroy job, queued behind the provision.
        Raises ``InvalidTransitionError`` (both versions), ``UnallocatedVmError`` (v1, no
        server) or ``VmAlreadyDestroyedError`` (v2 DELETE of a destroyed VM), each with this
        version's ``allowed_actions`` (``allowed_actions``): every refusal because of state
        names them (api.md, "Errors"; contract tester: the last two had none).
        """
        try:
            return self._plan(state, action, vm_uuid=vm_uuid, idempotent=idempotent,
                              server_removed=server_removed, has_server=has_server,
                              placed=placed)
        except (InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError) as refusal:
            refusal.allowed_actions = self.allowed_actions(state, has_server=has_server,
                                                           placed=placed)
            raise

    def require(self, state: VmState, action: Action, *, has_server: bool,
                placed: bool = False) -> Verdict:
        """``rules.require``, its refusal naming the actions this version admits (the
        quarantine's, which no version answers otherwise; ``placed`` as ``admit``'s)."""
        try:
            return rules.require(state, action, has_server=has_server)
        except (InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError) as refusal:
            refusal.allowed_actions = self.allowed_actions(state, has_server=has_server,
                                                           placed=placed)
            raise

    def allowed_actions(self, state: VmState, *, has_server: bool,
                        placed: bool = False) -> list[str]:
        """The actions of the rules table that this version admits for a VM in ``state``
        (on a server or not: ``has_server``; shown on one: ``placed``, as ``admit``'s), in
        table order: what a refusal names, only what would be accepted (api.md). The
        table's own list but for what the version refuses: version 1 what waits for the
        provision (a quarantine aside, and deleting a placed VM) and deleting a running or
        stopped VM on no server; version 2 deleting a destroyed VM."""
        return [name for name in rules.allowed_actions(state, has_server=has_server)
                if (self.admits_nic_changes(state, has_server=has_server)
                    if name in rules.NIC_CHANGES
                    else self._admits(state, Action(name), has_server, placed))]

    def admits_nic_changes(self, state: VmState, *, has_server: bool) -> bool:
        """Whether this version takes ``add_nics`` or ``remove_nics`` of a VM in ``state``:
        where the table allows them (``rules.nic_changes_allowed``), but for a provisioning
        VM in version 1, refused as VMAPI does (``UnallocatedVM``)."""
        if state is VmState.PROVISIONING and self.major < 2:
            return False
        return rules.nic_changes_allowed(state, has_server=has_server)

    def _admits(self, state: VmState, action: Action, has_server: bool, placed: bool) -> bool:
        try:
            self._plan(state, action, vm_uuid="", has_server=has_server, placed=placed)
        except (InvalidTransitionError, UnallocatedVmError, VmAlreadyDestroyedError):
            return False
        return True

    def _plan(
        self, state: VmState, action: Action, *, vm_uuid: str, idempotent: bool = False,
        server_removed: bool = False, has_server: bool = True, placed: bool = False,
    ) -> JobPlan:
        """``admit``'s decision; a refusal names the rules table's allowed actions."""
        try:
            verdict = rules.require(state, action, has_server=has_server)
        except InvalidTransitionError as refusal:
            if refusal.on_no_server and self.major < 2:  # Verdict.UNALLOCATED
                raise UnallocatedVmError(state, action.value) from None
            raise
        if (action is Action.DESTROY and not has_server and self.major < 2
                and state in (VmState.RUNNING, VmState.STOPPED)):
            raise UnallocatedVmError(state, action.value)
        if (action is Action.DESTROY and server_removed and verdict is Verdict.ALLOWED
                and self.major >= 2):
            return JobPlan(if_already=IfAlready.SUCCEED, destroy_now=True)
        if verdict is Verdict.QUEUED:
            # version 1 waits for nothing, as VMAPI: but its DeleteVm checks only the VM's
            # server_uuid, which a placed provisioning VM shows (``placed``)
            v1_delete = action is Action.DESTROY and placed
            if self.major < 2 and action is not Action.QUARANTINE and not v1_delete:
                raise UnallocatedVmError(state, action.value)
            return JobPlan(
                if_already=IfAlready.SUCCEED,
                cancel_queued_provision=action is Action.DESTROY,
            )
        if verdict is Verdict.ALREADY and action is Action.DESTROY and self.major >= 2:
            raise VmAlreadyDestroyedError(vm_uuid)
        return JobPlan(if_already=self.if_already(action, idempotent=idempotent))

    def if_already(self, action: Action, *, idempotent: bool) -> IfAlready:
        """What a job for ``action`` admitted in this version does when its target state
        already holds: what tells two requests of one action apart (a repeat merges only
        into an active job that behaves as it would; ``Vm.matching_active_job``)."""
        # A delete finding its VM already destroyed succeeds doing nothing in version 1 too,
        # whether the VM was destroyed before the request or while the job waited its ticket.
        if self.major >= 2 or idempotent or action is Action.DESTROY:
            return IfAlready.SUCCEED
        return IfAlready.FAIL


def behaviour_for(version: str) -> Behaviour:
    """The behaviour of a negotiated version."""
    return Behaviour(version)


NEWEST = Behaviour(max(SUPPORTED_VERSIONS, key=_parse))
OLDEST = Behaviour(min(SUPPORTED_VERSIONS, key=_parse))
