"""Derived stream ids carry their mark, and only they in practice (domain/derived_ids.py)."""

from __future__ import annotations

import uuid

from domain.alias_hold import hold_id
from domain.derived_ids import derived_id, is_derived_id
from domain.network_external import external_id


def test_a_derived_id_is_a_marked_version_5_uuid_the_same_for_the_same_name():
    namespace = uuid.UUID(int=7)
    made = derived_id(namespace, "web")
    assert made == derived_id(namespace, "web") != derived_id(namespace, "db")
    assert made.version == 5 and made.variant == uuid.RFC_4122
    assert is_derived_id(made) and is_derived_id(str(made).upper())


def test_the_streams_named_from_names_have_derived_ids():
    assert is_derived_id(hold_id("930896af-bf8c-48d4-885c-6573a94b1853", "web"))
    assert is_derived_id(external_id("5f3c7d2e-1111-4222-8333-444455550099"))


def test_random_and_plain_name_based_uuids_and_text_are_not_derived():
    assert not any(is_derived_id(uuid.uuid4()) for _ in range(1000))
    assert not is_derived_id(uuid.uuid5(uuid.UUID(int=7), "web"))
    assert not is_derived_id("not a uuid")
