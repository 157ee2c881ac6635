"""The hash chain's canonical JSON (domain/chain.py): the encoder made once writes exactly what
``json.dumps(sort_keys=True, separators=(",", ":"), default=str)`` writes, so every link stored
before it still verifies."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from enum import Enum
from uuid import UUID

from domain import chain


class Colour(str, Enum):
    RED = "red"


ODD_VALUES = [
    {"b": 1, "a": {"d": [None, True, False], "c": 0}},  # nested keys sorted
    [1.5, 0.1, 1e16, 1e-7, -0.0, float("nan"), float("inf"), 2**70],
    ["é", "☃", "\u2028", 'quote " and \\ backslash', "\x00\x1f"],
    {"when": datetime(2026, 12, 1, 16, 0, 0, 123456, tzinfo=UTC),
     "who": UUID(int=7), "colour": Colour.RED, "pair": (1, 2)},
    {2: "two", 1: "one"},  # keys that are not strings, which json.dumps turns into strings
]


def test_canonical_json_is_byte_for_byte_what_json_dumps_writes():
    for value in ODD_VALUES:
        expected = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
        assert chain._canonical_json(value) == expected, value


def test_a_link_is_the_sha256_of_the_canonical_form_without_the_excluded_fields():
    fields = {"timestamp": datetime(2026, 1, 2, tzinfo=UTC), "ram": 1024, "chain": "x",
              "class_version": 2, "originator_topic": "vm", "tags": {"é": 1.5}}
    stream = UUID(int=1)
    canonical = json.dumps(
        [chain.GENESIS, str(stream), 1, "vm.created",
         {"timestamp": fields["timestamp"], "ram": 1024, "tags": {"é": 1.5}}],
        sort_keys=True, separators=(",", ":"), default=str)
    assert chain.link(chain.GENESIS, stream, 1, "vm.created", fields) == hashlib.sha256(
        canonical.encode()).hexdigest()
