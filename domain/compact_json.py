"""JSON text with one C encoder made once and reused: ``json.dumps`` (and
``JSONEncoder.encode``) build a new encoder on every call, which costs about as much as
encoding an event's few hundred bytes, and every save encodes each event twice (its hash-chain
link and its stored state: docs/performance.md, "Batched replay").
"""

from __future__ import annotations

import json.encoder
from collections.abc import Callable
from typing import Any


def reused_encoder(default: Callable[[Any], Any], *, ensure_ascii: bool, sort_keys: bool,
                   separators: tuple[str, str] = (",", ":")) -> Callable[[Any], str] | None:
    """A function giving the text ``json.dumps(value, default=default, ensure_ascii=...,
    sort_keys=..., separators=...)`` gives (compact by default), from one C encoder; None
    where ``json`` has no C accelerator (then use ``json`` itself).

    The same C function ``JSONEncoder.iterencode`` calls, with the arguments it passes for
    those settings, so the same text. Without markers: no check for circular containers (an
    event's state is a tree), which is also what makes one encoder safe to share between
    threads (it keeps no state between calls)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    strings = (json.encoder.encode_basestring_ascii if ensure_ascii
               else json.encoder.encode_basestring)
    # markers, default, string encoder, indent, key and item separators, sort_keys, skipkeys,
    # allow_nan
    item_separator, key_separator = separators
    encode = make(None, default, strings, None, key_separator, item_separator, sort_keys,
                  False, True)
    return lambda value: "".join(encode(value, 0))
