"""Request bodies, strict: an unknown field is refused naming it, every number and string is
bounded (api.md, "Errors"; issue "Security": bad input changes nothing)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from domain import policy
from domain.json_input import at_field, printable, unstorable
from projections.formats import INSTANT_EXPECTED, MAX_INTEGER, in_utc_range, parse_iso_instant
from service.api.headers import MAX_X_CONTEXT_BYTES
from service.api.params import integer_refusal
from service.api.vmapi_fields import Alias, Name, Uuid, refused_as
from service.api.vmapi_metadata import CustomerMetadata, Metadata, Tags, UpdatedTags
from service.api.vmapi_numbers import body_integer, vmapi_number_refusal

# the body value types every route's model takes
__all__ = ["Alias", "Metadata", "Name", "Uuid"]

MAX_RAM_MIB = 4 * 1024 * 1024  # 4 TiB

Brand = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[a-z0-9][a-z0-9-]*$")]
#: The brands VMAPI creates VMs of and filters them by (sdc-vmapi ``lib/common/validation.js``,
#: ``VALID_VM_BRANDS``); an agent may still report a VM of another (``Brand``).
VMAPI_BRANDS = ("bhyve", "joyent", "joyent-minimal", "kvm", "lx")


def _vmapi_brand(value: str) -> str:
    if value not in VMAPI_BRANDS:
        raise ValueError(f"Must be one of: {', '.join(VMAPI_BRANDS)}")  # VMAPI's words
    return value


CreatableBrand = Annotated[str, AfterValidator(_vmapi_brand),
                           Field(json_schema_extra={"enum": list(VMAPI_BRANDS)})]


def _true_or_false(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise ValueError("must be true or false")


#: A boolean a body gives: ``true``/``false`` or ``"true"``/``"false"``, nothing else (VMAPI's
#: startVm/stopVm take only these; pydantic's own ``bool`` read ``"yes"``, ``"on"``, ``1`` as
#: true, where the same parameter in the query is refused).
Boolean = Annotated[bool, BeforeValidator(_true_or_false)]


def _rfc3339(value: Any) -> Any:
    # the grammar every instant the API reads has (parse_iso_instant): pydantic's own reads
    # ISO 8601's other forms ("," before the fraction, "+00", a space for "T") and numbers
    if isinstance(value, datetime):  # built in code, not sent
        return value
    moment = parse_iso_instant(value) if isinstance(value, str) else None
    if moment is None:
        raise PydanticCustomError("value_error", INSTANT_EXPECTED)
    return moment


def _writable_in_utc(value: datetime) -> datetime:
    if not in_utc_range(value):
        raise ValueError("must be an instant of years 1 to 9999 in UTC")
    return value


#: An instant a body gives: an RFC 3339 ``date-time`` with its time zone, and one UTC can
#: write (``9999-12-31T23:59:59-01:00`` is in year 10000 there: stored, it made every reader
#: of the VM's events fail).
Instant = Annotated[AwareDatetime, BeforeValidator(_rfc3339),
                    AfterValidator(_writable_in_utc)]


#: The rules of a VM's sizes and metadata, CreateVm's, shared by every body that sets them
#: (CreateVm, UpdateVm, vm-agent's report): ``true`` or ``"1024"`` is no size.
Ram = Annotated[int, Field(ge=1, le=MAX_RAM_MIB, strict=True)]
MAX_CPU_CAP = 100_000
CpuCap = Annotated[int, Field(ge=0, le=MAX_CPU_CAP, strict=True)]
#: CreateVm's: VMAPI's createVm takes a number or its decimal text (``"ram": "1024"``) and
#: refuses any other in its own words (service/api/vmapi_numbers.py); a compute agent's report
#: keeps ``Ram`` and ``CpuCap``.
CreateRam = Annotated[int, body_integer(1, MAX_RAM_MIB, vmapi_number_refusal(
    1, vmapi_maximum=None, maximum=MAX_RAM_MIB)), Field(ge=1, le=MAX_RAM_MIB)]
CreateCpuCap = Annotated[int, body_integer(0, MAX_CPU_CAP, vmapi_number_refusal(
    0, vmapi_maximum=None, maximum=MAX_CPU_CAP)), Field(ge=0, le=MAX_CPU_CAP)]
#: stop's and reboot's grace period: VMAPI passes it on unread; taken as in the query.
Timeout = Annotated[int, body_integer(0, MAX_INTEGER, integer_refusal(0, MAX_INTEGER)),
                    Field(ge=0, le=MAX_INTEGER)]


class StrictModel(BaseModel):
    """Refuses unknown fields, and strings, keys, numbers and nesting that cannot be stored
    (``unstorable``), each naming its field: every body any route reads is one of these."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        # Before every other validator, so none meets a value nested past what it can walk.
        # Each field's problem is located at the field; the body's own object is level 1.
        if not isinstance(data, dict):
            problem = unstorable(data)
            if problem:
                raise ValueError(problem)
            return data
        for key, value in data.items():
            field = printable(str(key))
            problem = (unstorable(str(key), f"{field} (the key)")
                       or at_field(unstorable(value, field, levels_above=1), field))
            if problem:
                raise PydanticValidationError.from_exception_data(cls.__name__, [
                    InitErrorDetails(type=PydanticCustomError("value_error", "{problem}",
                                                              {"problem": problem}),
                                     loc=(field,), input=None)])
        return data


class MetadataFields(StrictModel):
    """The fields CreateVm and UpdateVm share (each metadata field an object or its JSON
    text: service/api/vmapi_metadata.py)."""

    alias: Alias | None = None
    customer_metadata: CustomerMetadata | None = None
    internal_metadata: Metadata | None = None
    tags: Tags | None = None


MAX_VOLUMES = 16


MAX_NETWORKS = 32
_MAX_NETWORKS_TEXT = MAX_NETWORKS * 65 - 1  # as many names of 64 characters, with commas


def _bounded_networks(value: list[Any] | str) -> list[Any] | str:
    # Each form in its own unit: a bound on the union (Field(max_length=32)) measured a
    # string in characters as if they were entries, so one uuid (36) was too many.
    if isinstance(value, str):
        if not value or len(value) > _MAX_NETWORKS_TEXT:
            raise ValueError(f"must be 1 to {_MAX_NETWORKS_TEXT} characters")
    elif len(value) > MAX_NETWORKS:
        raise ValueError(f"at most {MAX_NETWORKS} networks")
    return value


#: CreateVm's and add_nics' ``networks`` (service/api/network_params.py reads each form): a
#: list of at most 32 entries, or VMAPI's comma-separated string of as many uuids or names.
Networks = Annotated[list[str | dict[str, Any]] | str, AfterValidator(_bounded_networks)]


def directory_of(mountpoint: str) -> str:
    """The directory ``mountpoint`` names, spelt one way: ``/a//b/`` is ``/a/b``."""
    return "/" + "/".join(part for part in mountpoint.split("/") if part)


MOUNTPOINT = ("must be an absolute path below / (as /data), of 2 to 255 characters: letters, "
              "digits, '.', '_', '-' and '/'")


class VolumeMount(StrictModel):
    """A volume a VM mounts: which one, and where (an absolute path, with no ``.`` or ``..``
    part: ``/a/c/../b`` is ``/a/b`` spelt otherwise, or outside the VM's root)."""

    volume_uuid: Uuid
    mountpoint: Annotated[str, Field(min_length=2, max_length=255,
                                     pattern=r"^/[A-Za-z0-9._-][A-Za-z0-9._/-]*$"),
                          refused_as(MOUNTPOINT)]

    @field_validator("mountpoint")
    @classmethod
    def _no_dot_parts(cls, value: str) -> str:
        if any(part in (".", "..") for part in value.split("/")):
            raise ValueError("a mountpoint may not have a . or .. part")
        return value


def _carried_out(value: str | dict[str, str]) -> str | dict[str, str]:
    policy.validate(value)  # the domain's rule, checked with every other field's (Vm.create)
    return value


#: CreateVm's ``persistence``: a preset or its rows, kept as given.
Persistence = Annotated[Literal["persistent", "ephemeral"] | dict[str, str],
                        AfterValidator(_carried_out)]


class CreateVmRequest(MetadataFields):
    """CreateVm (``POST /vms``): ``owner_uuid``, ``brand`` and ``ram`` (MiB) are required."""

    owner_uuid: Uuid
    brand: CreatableBrand
    ram: CreateRam
    image_uuid: Uuid | None = None
    cpu_cap: CreateCpuCap | None = None
    server_uuid: Uuid | None = None
    # A preset, or its rows set one by one ({"preset": "persistent", "guest_crash":
    # "destroy"}), which Vm.create checks against domain/policy.py (ValidationFailed naming
    # persistence: an unknown row or response, or one not carried out).
    persistence: Persistence = "persistent"
    volumes: list[VolumeMount] = Field(default_factory=list, max_length=MAX_VOLUMES)
    uuid: Uuid | None = None
    # Sent by the VMAPI client for its caller (cloudapi does); validated, not recorded.
    origin: str | None = Field(None, min_length=1, max_length=256)
    creator_uuid: Uuid | None = None
    # VMAPI's forms (service/api/network_params.py): uuids, {uuid, primary, ip}, names
    networks: Networks | None = None
    # in the body or the query, as an action's (VMAPI's createVm reads req.params.sync)
    sync: Boolean | None = None

    @field_validator("volumes")
    @classmethod
    def _one_volume_per_mountpoint(cls, value: list[VolumeMount]) -> list[VolumeMount]:
        # one directory however spelt: /a/b, /a//b and /a/b/ are one mountpoint
        mountpoints = [directory_of(mount.mountpoint) for mount in value]
        if len(set(mountpoints)) != len(mountpoints):
            raise ValueError("two volumes cannot share a mountpoint")
        return value

    def fingerprint_form(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields``, the body as an ``Idempotency-Key`` hashes it
        (service/api/fingerprints.py), with ``persistence`` as the policy it gives
        (``policy.table``), left out where that is the default's: ``{"preset":
        "persistent"}`` is ``"persistent"``, one VM whose policy acts alike."""
        if "persistence" not in fields:
            return fields
        rest = {name: value for name, value in fields.items() if name != "persistence"}
        meant = policy.table(self.persistence)
        return rest if meant == policy.table(policy.DEFAULT_PRESET) else {
            **rest, "persistence": meant}


def _bounded_context(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value, separators=(",", ":"),
                                            ensure_ascii=False).encode()) > MAX_X_CONTEXT_BYTES:
        raise ValueError(f"at most {MAX_X_CONTEXT_BYTES} bytes as JSON, as x-context")
    return value


# A body's ``context``: kept in the job's params as ``x-context`` is, so bounded as it is
# (a tester stored 900 KB in one JobQueued through the body)
Context = Annotated[dict[str, Any] | None, AfterValidator(_bounded_context)]


class ActionBody(StrictModel):
    """The optional body of start, stop, kill, reboot: what the VMAPI client may send there as
    in the query (restify's mapParams; service/api/action_params.py compares the two). The
    route checks which ``action`` it is; ``timeout`` (stop's, reboot's grace period),
    ``origin`` and ``creator_uuid`` are validated, not recorded, as in the query."""

    action: str | None = Field(None, max_length=32)
    owner_uuid: Uuid | None = None
    idempotent: Boolean | None = None
    sync: Boolean | None = None
    context: Context = None
    timeout: Timeout | None = None
    origin: str | None = Field(None, min_length=1, max_length=256)
    creator_uuid: Uuid | None = None


class DeleteVmBody(StrictModel):
    """The optional body of DeleteVm: what the VMAPI client may send there as in the query
    (restify's mapParams, as for an action: ``ActionBody``); any other field is refused by
    name. It was never read, so a malformed body was answered 202 with a destroy job."""

    owner_uuid: Uuid | None = None
    sync: Boolean | None = None
    context: Context = None
    origin: str | None = Field(None, min_length=1, max_length=256)
    creator_uuid: Uuid | None = None


class UpdateVmRequest(MetadataFields, ActionBody):
    """``POST /vms/{uuid}?action=update``: the fields to change, and an action's own. Its
    ``tags`` may not set Docker's own either, as VMAPI's update refuses them."""

    tags: UpdatedTags | None = None


MAX_MACS = 32
INVALID_MACS = "Invalid MAC addresses object"  # VMAPI's validateMacs


def _macs(value: Any) -> Any:
    # VMAPI's validateMacs: a value JavaScript deems false ("", null, false, 0) is missing
    # (an empty array is not); a string is its comma-separated MACs (validStrings, split as
    # VMAPI splits it, nothing trimmed); an array must hold strings alone
    if value is None or value is False or value == "" or (
            isinstance(value, int | float) and not isinstance(value, bool) and value == 0):
        raise PydanticCustomError("missing", "Field required")
    macs = value.split(",") if isinstance(value, str) else value
    if not isinstance(macs, list) or not all(isinstance(mac, str) for mac in macs):
        raise PydanticCustomError("value_error", INVALID_MACS)
    # ours on top, in the same words and naming macs alone as VMAPI's do (pydantic's own
    # texts named "macs.1" with "String should have at least 1 character": a tester)
    problem = (f"at least 1 and at most {MAX_MACS} MAC addresses"
               if not 1 <= len(macs) <= MAX_MACS
               else "an empty MAC address" if "" in macs
               else "a MAC address of more than 17 characters"
               if any(len(mac) > 17 for mac in macs) else None)
    if problem is not None:
        raise PydanticCustomError("value_error", "{invalid}: {problem}",
                                  {"invalid": INVALID_MACS, "problem": problem})
    return macs


#: ``remove_nics``' ``macs``: an array of MACs or one comma-separated string of them, as
#: VMAPI takes it, in the body or the query (service/api/action_params.py); ours, at most 32
#: of 1 to 17 characters each (a MAC the VM has no NIC with is the command's to refuse).
_MacList = Annotated[list[Annotated[str, Field(min_length=1, max_length=17)]],
                     Field(min_length=1, max_length=MAX_MACS)]
# (each form with its own bounds in the schema: a bound on the union measured the string's
# characters as if they were MACs)
Macs = Annotated[_MacList, BeforeValidator(
    _macs, json_schema_input_type=_MacList | Annotated[str, Field(min_length=1)])]


class AddNicsBody(ActionBody):
    """``?action=add_nics``: the networks to add a NIC on (CreateVm's forms)."""

    networks: Networks


class RemoveNicsBody(ActionBody):
    """``?action=remove_nics``: the MACs of the NICs to remove."""

    macs: Macs


KILL_SIGNALS = frozenset({"SIGKILL", "KILL", "9"})
ONLY_SIGKILL = "only SIGKILL (a forced stop) can be sent"


def is_kill_signal(value: Any) -> bool:
    """Whether kill's ``signal`` (in its body or its query) is SIGKILL: ``SIGKILL``, ``KILL``
    or ``9``, in any case, as text or a number."""
    return not isinstance(value, bool) and str(value).upper() in KILL_SIGNALS


class KillBody(ActionBody):
    """The optional body of kill: the VMAPI client's ``signal``. Only SIGKILL, VMAPI's default,
    is accepted: kill is modelled as a forced stop, and no other signal can be delivered."""

    signal: str | int | None = None

    @field_validator("signal", mode="before")
    @classmethod
    def _only_sigkill(cls, value: Any) -> Any:
        if value is None:
            return None
        if not is_kill_signal(value):
            raise ValueError(ONLY_SIGKILL)
        return value
