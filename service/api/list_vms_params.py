"""ListVms' query parameters, validated as VMAPI validates them, with VMAPI's error texts word
for word (sdc-vmapi ``lib/common/validation.js`` ``validateListVmsParams``, ``lib/common/
marker.js``, ``lib/validation/sort.js``; docs/vmapi-compatibility.md lists every text).

Every parameter is checked and every problem reported at once (``errors``, one entry per
problem); only when each parameter is valid on its own is ``offset`` with ``marker`` refused,
as VMAPI does, with ``{"fields": ["offset", "marker"], "code": "ConflictingParameters"}``.
The top-level message is VMAPI's ``Invalid Parameters`` (``errors.INVALID_PARAMETERS``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from fastapi import Request

from domain.json_input import cut
from domain.states import VmState
from projections.formats import rfc3339
from projections.vm_markers import InvalidMarkerError, decode_our_marker
from projections.vm_queries import SORT_FIELDS, Page, VmFilter
from service.api.auth import visible_owner
from service.api.errors import invalid_parameters
from service.api.params import MAX_INTEGER, MAX_LIMIT, integer_param, parse_timestamp
from service.api.query_parameters import (
    BOOLEAN,
    LIMIT,
    TEXT,
    UUID,
    Param,
    QueryParameters,
    integer,
    one_of,
    owner,
)
from service.api.schemas import VMAPI_BRANDS
from service.api.vmapi_markers import read_vmapi_marker
from service.api.vmapi_numbers import vmapi_number_refusal
from service.api.vmapi_rules import ALIAS_MISMATCH, ALIAS_RE, INVALID_UUID, is_alias, is_uuid

# \Z, not $: Python's $ also matches before a final newline, JavaScript's (VMAPI's) does not
RAM_RE = re.compile(r"^0\Z|^([1-9][0-9]*\Z)")
RAM_RE_SHOWN = r"/^0$|^([1-9][0-9]*$)/"
VMAPI_STATES = ("active", "destroyed", "running", "stopped")
# vmledger's own states are accepted too; VMAPI's message names only its four.
STATES = frozenset(VMAPI_STATES) | {s.value for s in VmState}
# The VM fields VMAPI's ``fields=`` accepts (validation.js VM_FIELDS), with ours (api.md).
VMAPI_VM_FIELDS = frozenset((  # noqa: SIM905 - as a list of words, as validation.js has it
    "alias autoboot billing_id brand cpu_cap cpu_shares cpu_type customer_metadata "
    "delegate_dataset disk_driver dns_domain docker do_not_inventory firewall_enabled "
    "firewall_rules fs_allowed hostname indestructible_delegated indestructible_zoneroot "
    "init_name internal_metadata kernel_version limit_priv locality maintain_resolvers "
    "max_locked_memory max_lwps max_physical_memory max_swap mdata_exec_timeout networks "
    "nic_driver last_modified overprovision_cpu overprovision_memory owner_uuid package_name "
    "package_version quota ram resolvers state server_uuid tags tmpfs uuid vcpus volumes "
    "zfs_data_compression zfs_io_priority zfs_snapshot_limit zlog_max_size zone_state"
).split())
OUR_VM_FIELDS = frozenset((  # noqa: SIM905 - as a list of words, as above
    "image_uuid nics desired_state persistence error quarantine active_job_uuid "
    "queued_job_uuids create_timestamp destroyed version"
).split())
# VMAPI's fields= takes it besides the VM's fields (validation.js validVmField) and answers
# each VM's role tags; vmledger records none (their routes are not implemented), so it is [].
ROLE_TAGS = "role_tags"
# Accepted by VMAPI; vmledger records none of these, so a value matches no VM.
UNRECORDED = ("billing_id", "package_name", "package_version")
NOT_SUPPORTED = ("predicate", "query")  # Moray's LDAP and JSON predicates (empty: none)
POLYMORPHIC = ("tag", "internal_metadata")
# How many tag.K and internal_metadata.K filters one request may give, in all (VMAPI states
# none). A VM may hold any number of them up to its tags' and metadata's 128 keys each, but a
# real search names a few; past this many each filter made the query dearer for every
# reader of the database (docs/api.md, "GET /vms").
MAX_PROPERTY_FILTERS = 32
#: ListVms' (and CountVms', and the console fleet's) parameters; ``tag.K=V`` and
#: ``internal_metadata.K=V`` are named by their key, which no OpenAPI parameter can be (the
#: route's description tells of them); Moray's filters and a bare ``tag`` are taken only to
#: be refused in words of their own.
LIST_VMS = QueryParameters(
    owner("only VMs of this owner"),
    Param("uuid", "only the VM with this uuid", UUID),
    Param("uuids", "only these VMs (comma-separated uuids)"),
    Param("server_uuid", "only VMs on this server", UUID),
    Param("image_uuid", "only VMs of this image", UUID),
    Param("state", "a state, or active (not destroyed and not failed)", one_of(sorted(STATES))),
    Param("brand", "only VMs of this brand", one_of(VMAPI_BRANDS)),
    Param("alias", "only VMs whose alias starts so",
          {"type": "string", "pattern": f"^{ALIAS_RE.pattern}$"}),
    Param("ram", "only VMs with this much memory, in MiB (any digits, as VMAPI: one past "
          "every VM's memory matches none)", {"type": "integer", "minimum": 0}),
    Param("docker", "only Docker VMs (true) or only the others (false)", BOOLEAN),
    Param("create_timestamp", "only VMs created at this instant: milliseconds since the "
          "epoch, or an RFC 3339 instant"),
    Param("stale_mounts", "true: only VMs with a volume mount whose address is stale; "
          "false: only the others", BOOLEAN),
    *(Param(name, "accepted as VMAPI does; vmledger records none, so a value matches no VM",
            UUID if name == "billing_id" else TEXT) for name in UNRECORDED),
    LIMIT,
    Param("offset", "skip this many matches first (not with marker)", integer(0)),
    Param("marker", "where the page starts: the previous page's x-next-marker header, or "
          "VMAPI's JSON marker (not with offset)"),
    Param("sort", "<field>[.asc|.desc] (case-insensitive) over " + ", ".join(SORT_FIELDS)),
    Param("fields", "only these fields of each VM (comma-separated; * for all)"),
    prefixes=tuple(f"{p}." for p in POLYMORPHIC), undeclared=(*NOT_SUPPORTED, *POLYMORPHIC))
KNOWN = LIST_VMS.names


class ListVmsQuery:
    """The parsed ListVms query: ``vm_filter``, ``page``, ``fields`` (None: every field;
    ``["*"]``: every field and ``role_tags``) and ``eventual`` (skip the read-your-writes
    wait)."""

    def __init__(self, request: Request):
        self.request = request
        self.params = request.query_params
        self.errors: list[dict[str, Any]] = []
        for name in self.params:
            if name.split(".")[0] not in KNOWN:
                self._invalid(name, "Invalid parameter")
        query = LIST_VMS.parse(request)
        self.eventual = query.eventual
        self._uuid("owner_uuid")
        self.vm_filter = VmFilter(owner_uuid=query.owner_uuid)
        self.errors += [e for e in query.errors
                        if e["field"] == "consistency"]  # the rest are checked below
        if query.params.get("stale_mounts") is not None:
            self.vm_filter.stale_mounts = query.boolean("stale_mounts")
        self.errors += [e for e in query.errors if e["field"] == "stale_mounts"]
        self._filters()
        self.page = Page(limit=self._number("limit", minimum=1, maximum=MAX_LIMIT) or MAX_LIMIT,
                         seen_by=visible_owner(request))
        self.page.offset = self._number("offset", minimum=0) or 0
        self._sort()
        self.fields = self._fields()
        self._marker()
        if self.errors:
            raise invalid_parameters(request, self.errors)
        if self.page.after is not None and self.page.offset:
            # VMAPI: ``params.offset && params.marker`` (an offset of 0 skips nothing)
            raise invalid_parameters(request, [{
                "fields": ["offset", "marker"], "code": "ConflictingParameters",
                "message": "offset and marker cannot be used at the same time"}])

    def _invalid(self, field: str, message: str = "Invalid parameter") -> None:
        self.errors.append({"field": field, "code": "Invalid", "message": message})

    def _checked(self, name: str, valid: Callable[[str], object], message: str) -> str | None:
        """The parameter's value when it is given and ``valid``; None when it is absent, or
        refused with ``message``."""
        value = self.params.get(name)
        if value is not None and not valid(value):
            self._invalid(name, message)
            return None
        return value

    def _uuid(self, name: str) -> str | None:
        return self._checked(name, is_uuid, INVALID_UUID)

    def _number(self, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
        # VMAPI sets no upper bound on offset; ours (what a database integer holds) is
        # named only to a number above it
        return integer_param(self.params, name, minimum=minimum,
                             maximum=MAX_INTEGER if maximum is None else maximum,
                             refuse=self._invalid, message=vmapi_number_refusal(
                                 minimum, vmapi_maximum=maximum, maximum=MAX_INTEGER))

    def _filters(self) -> None:
        params, vm_filter = self.params, self.vm_filter
        for name in ("uuid", "server_uuid", "image_uuid"):
            setattr(vm_filter, name, self._uuid(name))
        if self._uuid("billing_id") is not None:
            vm_filter.unrecorded = True
        vm_filter.alias = self._checked("alias", is_alias, ALIAS_MISMATCH)
        vm_filter.brand = self._checked(
            "brand", VMAPI_BRANDS.__contains__, f"Must be one of: {', '.join(VMAPI_BRANDS)}")
        vm_filter.state = self._checked(
            "state", STATES.__contains__, f"Must be one of: {', '.join(VMAPI_STATES)}")
        docker = self._checked("docker", ("true", "false").__contains__, "Invalid parameter")
        if docker is not None:
            vm_filter.docker = docker == "true"
        ram = self._checked("ram", RAM_RE.match, f"String does not match regexp: {RAM_RE_SHOWN}")
        # RAM_RE forbids leading zeros, so length says it first (int() refuses 4,300 digits)
        if ram is not None and (len(ram) > len(str(MAX_INTEGER)) or int(ram) > MAX_INTEGER):
            vm_filter.unrecorded = True  # more than any VM has (and than SQLite's integers)
        elif ram is not None:
            vm_filter.ram = int(ram)
        stamp = params.get("create_timestamp")
        if stamp is not None:
            instant = parse_timestamp(stamp)
            if instant is None:
                self._invalid("create_timestamp", f"Invalid timestamp: {cut(stamp)}")
            else:
                vm_filter.create_timestamp = rfc3339(instant)
        uuids = self._checked("uuids", lambda v: all(is_uuid(u) for u in v.split(",")),
                              f"Invalid values: {cut(params.get('uuids') or '')}")
        if uuids is not None:
            vm_filter.uuids = uuids.split(",")
        if any(params.get(name) is not None for name in ("package_name", "package_version")):
            vm_filter.unrecorded = True
        for name in NOT_SUPPORTED:
            if params.get(name):  # VMAPI: an empty predicate or query is no filter
                self._invalid(name, "Not supported by vmledger: filter with the parameters "
                              "of ListVms instead")
        for name, value in params.items():
            prefix, dot, key = name.partition(".")
            if prefix not in POLYMORPHIC:
                continue
            if not dot or not key:
                self._invalid(prefix, f"Invalid {prefix} key: {json.dumps(key) if dot else 'undefined'}")
            elif not value:
                self._invalid(prefix, f"Invalid {prefix} value: {json.dumps(value)}")
            else:
                getattr(vm_filter, "tags" if prefix == "tag" else prefix)[key] = value
        given = len(vm_filter.tags) + len(vm_filter.internal_metadata)
        if given > MAX_PROPERTY_FILTERS:
            self._invalid("tag" if vm_filter.tags else "internal_metadata",
                          f"at most {MAX_PROPERTY_FILTERS} tag.K and internal_metadata.K "
                          f"filters in all (got {given})")

    def _sort(self) -> None:
        sort = self.params.get("sort")
        if not sort:
            return  # VMAPI: an empty sort is no sort
        key, dot, order = sort.partition(".")
        # VMAPI: the key exactly, the order in any case; ``ram`` is our name of its
        # ``max_physical_memory``, and we take the key in any case too.
        key = key.lower()
        if key not in SORT_FIELDS or "." in order or (dot and order.upper() not in ("ASC", "DESC")):
            self._invalid("sort", f"Invalid sort param: {cut(sort)}")
            return
        self.page.sort_field = key
        self.page.descending = order.upper() == "DESC"

    def _fields(self) -> list[str] | None:
        fields = self.params.get("fields")
        if fields is None:
            return None
        names = fields.split(",")
        valid = VMAPI_VM_FIELDS | OUR_VM_FIELDS | {"*", ROLE_TAGS}
        if not all(name in valid for name in names):
            self._invalid("fields", f"Invalid values: {cut(fields)}")
            return None
        return ["*"] if "*" in names else names

    def _marker(self) -> None:
        marker = self.params.get("marker")
        if marker is None:
            return
        try:
            ours = decode_our_marker(marker, self.page.sort)
        except InvalidMarkerError as error:
            # a position in another order names no place in this one: say which sort it
            # goes with (a tester got a bare "Invalid marker" for a sorted page's marker)
            self._invalid("marker", f"Invalid marker: {cut(marker)}. {error.reason}"
                          if error.made_for is None else
                          f"Invalid marker: it was made for sort={error.made_for}; send that "
                          f"sort with it (this request's is {self.page.sort})")
            return
        if ours is not None:
            self.page.after = ours
            return
        self.page.after, problems = read_vmapi_marker(marker, self.params.get("sort"),
                                                      self.page.sort_field)
        for problem in problems:
            # VMAPI's words, the marker cut (json_input.cut) so that the reason after it
            # stays in the bounded message (errors.MAX_MESSAGE)
            self._invalid("marker", f"Invalid marker: {cut(marker)}. {problem}")

    def project(self, vm: dict[str, Any]) -> dict[str, Any]:
        """``vm`` restricted to ``fields=`` (VMAPI's names: ``max_physical_memory`` is ``ram``;
        ``*`` is every field and ``role_tags``, as VMAPI's renderVms has it)."""
        if self.fields is None:
            return vm
        if self.fields == ["*"]:
            return {**vm, ROLE_TAGS: []}
        out = {name: vm[name] for name in self.fields if name in vm}
        if "max_physical_memory" in self.fields:
            out["max_physical_memory"] = vm["ram"]
        if ROLE_TAGS in self.fields:
            out[ROLE_TAGS] = []  # vmledger records none (VMAPI: [] for a VM without any)
        return out
