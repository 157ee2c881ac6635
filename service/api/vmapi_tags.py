"""VMAPI's rules for what a VM's ``customer_metadata`` and ``tags`` may hold, with its texts
word for word (sdc-vmapi ``lib/common/validation.js``, ``validMetadata`` and ``validTags``;
the rules of the Triton tags are those of the ``triton-tags`` 1.4.0 package it calls; upstream
vms.full.test.js ``create_vm_tags_not_ok``, ``change_with_bad_tags``):

- a value that is not a string, number or boolean is ``Forbidden Data Type``, and a
  ``customer_metadata`` key ending in ``_pw`` ``Forbidden Metadata Key`` (such keys hold
  passwords, which only ``internal_metadata`` may carry);
- a tag under ``triton.`` must be one VMAPI knows, of its type (a JSON string, boolean or
  number), its value valid for it (``triton.cns.services``' grammar, a DNS-safe
  ``triton.cns.reverse_ptr``, ``triton.cmon.groups``' groups);
- on an update (VMAPI's ``createMetadataObject``), none of Docker's own tags
  (``sdc_docker``, ``docker:label:com.docker.…``): vmledger makes no Docker VMs.

Each finds the first problem, in the order VMAPI walks the keys, as VMAPI reports one."""

from __future__ import annotations

import json
import re
from typing import Any

from domain.json_input import cut
from service.api.cns_services import cns_services_problem

FORBIDDEN_KEY = "Forbidden Metadata Key"
FORBIDDEN_DATA_TYPE = "Forbidden Data Type"
# JavaScript's /^(.*)_pw$/: its "." takes no line break, its "$" only the end
_PW_KEY = re.compile("[^\n\r\u2028\u2029]*_pw")
_DOCKER_TAG = re.compile(r"sdc_docker\Z|docker:label:triton\.|"
                         r"docker:label:(?:com|io|org)\.docker(?:project)?\.")
# VMAPI's DNS_NAME_RE, case-insensitive
_DNS_NAME = re.compile(r"[a-z0-9][a-z0-9\-]{0,62}(?:\.[a-z0-9][a-z0-9\-]{0,62})*", re.IGNORECASE)
_CMON_GROUPS = re.compile(r"[a-zA-Z0-9_\-]*(?:,[a-zA-Z0-9_\-]*)*")
CMON_MAX = 100  # groups, and characters a group

#: The Triton tags VMAPI knows, and the JavaScript type of each one's value.
TRITON_TAGS = {
    "triton.cmon.groups": "string",
    "triton.cns.services": "string",
    "triton.cns.disable": "boolean",
    "triton.cns.reverse_ptr": "string",
    "triton.network.public": "string",
    "triton.placement.exclude_virtual_servers": "boolean",
    "triton._test.string": "string",
    "triton._test.number": "number",
    "triton._test.boolean": "boolean",
}


def js_key_order(keys: Any) -> list[str]:
    """``keys`` in the order JavaScript walks an object's: array indices first, ascending,
    then the others as inserted (VMAPI reports the first bad key in that order)."""
    keys = list(keys)
    indices = sorted((k for k in keys if _is_index(k)), key=int)
    return indices + [k for k in keys if not _is_index(k)]


def _is_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and str(int(key)) == key and int(key) < 2**32 - 1


def metadata_problem(metadata: dict[str, Any], *, passwords: bool
                     ) -> tuple[str, str] | None:
    """The first key VMAPI's ``validMetadata`` refuses, with its message, or None: a value
    that is not a string, number or boolean (``null``, an object, an array) is ``Forbidden
    Data Type``; with ``passwords`` (``customer_metadata``'s), a key ending in ``_pw`` is
    ``Forbidden Metadata Key``. One walk, in JavaScript's key order, as VMAPI's."""
    for key in js_key_order(metadata):
        if metadata[key] is None or isinstance(metadata[key], dict | list):
            return key, FORBIDDEN_DATA_TYPE
        if passwords and _PW_KEY.fullmatch(key):
            return key, FORBIDDEN_KEY
    return None


def tags_problem(tags: dict[str, Any], *, updating: bool) -> str | None:
    """VMAPI's message for the first tag it refuses, or None. ``updating``: Docker's tags
    are refused too, as VMAPI's update (not its create) refuses them."""
    for key in js_key_order(tags):
        if key.startswith("triton."):
            problem = triton_tag_problem(key, tags[key])
            if problem is not None:
                return problem
        elif updating and _DOCKER_TAG.match(key):
            return f'Special tag "{cut(key)}" not supported'
    return None


def js_type(value: Any) -> str:
    """JavaScript's ``typeof`` of a JSON scalar."""
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else "string"


def js_json(value: Any) -> str:
    """``JSON.stringify`` of a JSON scalar (``1.0`` is ``1`` there)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, ensure_ascii=False)


def triton_tag_problem(key: str, value: Any) -> str | None:
    """VMAPI's message for a ``triton.`` tag it refuses, or None."""
    expected = TRITON_TAGS.get(key)
    if expected is None:
        return f'Unrecognized special triton tag "{cut(key)}"'
    if js_type(value) != expected:
        return (f'Triton tag "{key}" value must be a {expected}: {cut(js_json(value))} '
                f'({js_type(value)})')
    if key == "triton.cns.services":
        return cns_services_problem(value)
    if key == "triton.cns.reverse_ptr" and (
            len(value) > 255 or not _DNS_NAME.fullmatch(value)):
        return f'invalid "triton.cns.reverse_ptr" tag: "{cut(value)}" is not DNS safe'
    if key == "triton.cmon.groups":
        return _cmon_groups_problem(value)
    return None


def _cmon_groups_problem(value: str) -> str | None:
    prefix = 'invalid "triton.cmon.groups" tag: '
    if not _CMON_GROUPS.fullmatch(value):
        return prefix + "groups must be strings comprised of letters, numbers, _, and -"
    groups = value.split(",")
    if len(groups) > CMON_MAX:
        return prefix + "must contain less than or equal to 100 group strings"
    seen: set[str] = set()
    for group in groups:
        if group in seen:
            return prefix + f"contains duplicate group {cut(group)}"
        seen.add(group)
        if not 1 <= len(group) <= CMON_MAX:
            return prefix + ("group name must be no less than 1 character and no greater "
                             "than 100 characters")
    return None
