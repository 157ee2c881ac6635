"""Ids of the streams the service names itself from a name: the same in every process, so every
writer of one name appends to one stream (an alias hold: ``domain.alias_hold.hold_id``; an
external network's noted addresses: ``domain.network_external.external_id``).

A version-5 uuid of the name alone could be computed by anyone, and a client may choose its
resources' uuids (CreateVm's ``uuid``, ``POST /networks``' ``uuid``, a VM its agent reports):
one taking such an id before the service first writes its stream would hold that name's stream
for good (a tester: another owner's alias, and a network uuid's volumes, then failed with 503).
So a derived id carries a mark, four fixed bytes in its node field, and the change loop refuses
a client's resource an id with that mark (``UuidTakenError``, as a uuid taken: docs/api.md).
A random uuid has the mark once in 2^32.
"""

from __future__ import annotations

from uuid import UUID, uuid5

# "vmld": bytes 10 to 13 of every derived id (the node field; the version and variant bits,
# in bytes 6 and 8, stay version 5's)
MARK = b"vmld"
_AT = slice(10, 14)


def derived_id(namespace: UUID, name: str) -> UUID:
    """The version-5 uuid of ``name`` in ``namespace``, with the mark (``is_derived_id``)."""
    raw = bytearray(uuid5(namespace, name).bytes)
    raw[_AT] = MARK
    return UUID(bytes=bytes(raw))


def is_derived_id(value: UUID | str) -> bool:
    """Whether ``value`` (a uuid, or its text in any case) carries the derived ids' mark; False
    for text that is no uuid."""
    try:
        uuid = value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        return False
    return uuid.bytes[_AT] == MARK
