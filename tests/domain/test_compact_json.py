"""``domain.compact_json.reused_encoder``: one C encoder made once writes the text
``json.dumps`` writes with the same settings (the hash chain, the stored events and the log
lines rely on it)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from domain.compact_json import reused_encoder

VALUES = [
    {"b": 1, "a": [1, 2.5, None, True], "é": "ünïcode \"quoted\" \\ \n", "n": {"x": {}}},
    [],
    {"big": 10**30, "neg": -0.0, "text": "\u2028\x00"},
    {"odd": Decimal("1.10"), "set": {3}},
]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("sort_keys", [True, False])
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_the_text_is_json_dumps_text(value, ensure_ascii, sort_keys, separators):
    encode = reused_encoder(str, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                            separators=separators)
    assert encode is not None  # CPython's json has its C accelerator
    assert encode(value) == json.dumps(value, default=str, ensure_ascii=ensure_ascii,
                                       sort_keys=sort_keys, separators=separators)


def test_compact_unless_told():
    encode = reused_encoder(str, ensure_ascii=True, sort_keys=False)
    assert encode is not None
    assert encode({"a": [1, 2]}) == '{"a":[1,2]}'
