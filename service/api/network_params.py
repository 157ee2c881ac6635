"""CreateVm's and ``add_nics``' ``networks``, in each form VMAPI takes (sdc-vmapi
``lib/common/validation.js`` ``validNetworks``, whose error texts these are):

- a list (or comma-separated string) of network uuids: ``["<uuid>", …]``;
- objects ``{uuid, primary, ip}`` (an address asked for) or ``{ipv4_uuid, ipv4_ips: [ip],
  ipv4_count: 1, primary}``;
- names: ``{name: "external"}``, and (ours) a string that is not a uuid.

At most one is primary; with none, the first NIC of a VM is. A name is resolved to the oldest
network of that name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from domain.errors import ValidationError
from domain.json_input import cut
from service.api.vmapi_rules import is_uuid
from service.commands.networks import NetworkNotFoundError, NicRequest

MAX_NICS = 32


def _invalid(message: str) -> ValidationError:
    return ValidationError("networks", "Invalid", message)


def _primary(value: Any) -> bool:
    return value is True or value == "true"


def _address(field: str, value: Any) -> str:
    """``value``, the address a NIC asks for in ``field`` (``ip``, or ``ipv4_ips``' entry).
    Raises ``ValidationError`` naming that field unless it is a string holding an IPv4
    address (a number or a boolean is no address: ``168034325`` was read as 10.4.0.21)."""
    if not isinstance(value, str):
        raise _invalid(f"{field} must be a string holding an IPv4 address"
                       if field == "ip" else
                       f"{field} must hold strings, each an IPv4 address")
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        raise _invalid("ipv4_ips contains invalid IPv4 addresses" if field == "ipv4_ips"
                       else "ip is not an IPv4 address (dotted decimal, without leading "
                       "zeros)") from None
    return value


def _one(entry: Any) -> tuple[str | None, str | None, str | None, bool]:
    """(uuid, name, ip, primary) of one entry. Raises ``ValidationError``."""
    if entry == "":  # ("<uuid>,,": an empty name is a malformed list, no network's name)
        raise _invalid("Malformed networks object")
    if isinstance(entry, str):
        return (entry, None, None, False) if is_uuid(entry) else (None, entry, None, False)
    if not isinstance(entry, dict):
        raise _invalid("Malformed networks object")
    if "uuid" in entry and ("ipv4_uuid" in entry or "ipv6_uuid" in entry):
        raise _invalid("Network object uses both old uuid form and new ipvX_uuid form")
    if any(key in entry for key in ("ipv6_uuid", "ipv6_count", "ipv6_ips")):
        raise _invalid("IPv6 options are not currently supported")
    uuid = entry.get("uuid", entry.get("ipv4_uuid"))
    if "ipv4_count" in entry and "ipv4_ips" in entry:
        raise _invalid("cannot specify both an IP count and specific IPs")
    for other in ("ipv4_ips", "ipv4_count"):
        if "ip" in entry and other in entry:  # (which would win is no caller's guess)
            raise _invalid(f"cannot specify both ip and {other}")
    if "ipv4_count" in entry:
        if not isinstance(entry["ipv4_count"], int) or isinstance(entry["ipv4_count"], bool):
            raise _invalid("ipv4_count must be a number")
        if entry["ipv4_count"] != 1:
            raise _invalid("ipv4_count must be set to one")
    ip = _address("ip", entry["ip"]) if "ip" in entry else None
    if "ipv4_ips" in entry:
        ips = entry["ipv4_ips"]
        if not isinstance(ips, list):
            raise _invalid("ipv4_ips must be an array")
        if len(ips) != 1:
            raise _invalid("ipv4_ips may only have a single entry")
        ip = _address("ipv4_ips", ips[0])
    name = entry.get("name")
    if uuid is not None and not is_uuid(uuid):
        raise _invalid(f"Invalid uuid {cut(uuid)}")
    if uuid is None and (not isinstance(name, str) or not name):
        raise _invalid("Network object must specify a UUID or a name")
    return uuid, name, ip, _primary(entry.get("primary"))


def parse_networks(value: Any, by_name: Callable[[str], list[dict[str, Any]]]
                   ) -> list[NicRequest]:
    """The NICs ``value`` asks for, names resolved through ``by_name`` (the networks of that
    name, oldest first: ``NetworkQueries.by_name``), called only for a name. Raises
    ``ValidationError`` (field ``networks``) with VMAPI's message, or naming a network that
    does not exist."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not value:
        raise _invalid("Malformed networks object")
    if len(value) > MAX_NICS:
        raise _invalid(f"at most {MAX_NICS} networks")
    asked = [_one(entry) for entry in value]
    if sum(primary for *_, primary in asked) > 1:
        raise _invalid("Cannot specify more than one primary network")
    requests = []
    for uuid, name, ip, primary in asked:
        if uuid is None:
            named = by_name(str(name))
            if not named:
                raise NetworkNotFoundError(str(name))
            uuid = named[0]["uuid"]
        requests.append(NicRequest(network_uuid=uuid, ip=ip, primary=primary))
    return requests
