"""The event store's transcoder: the library's ``JSONTranscoder``, writing the same bytes with
one C encoder made once.

``JSONEncoder.encode`` builds a new C encoder for every call, which costs about as much as
encoding an event's few hundred bytes; every save pays it per event (docs/performance.md,
"Batched replay"). Reading is the library's own, unchanged.
"""

from __future__ import annotations

import json.encoder
from typing import Any

from eventsourcing.persistence import JSONTranscoder


class ReusedEncoderTranscoder(JSONTranscoder):
    """``JSONTranscoder`` whose ``encode`` reuses one C encoder with the settings of the
    library's ``self.encoder`` (compact separators, ``ensure_ascii=False``, the registered
    transcodings as ``default``), so the output is byte for byte the library's; only the
    check for circular containers is left out (an event's state is a tree). Where ``json``
    has no C accelerator it is the library's transcoder."""

    def __init__(self) -> None:
        super().__init__()
        make = getattr(json.encoder, "c_make_encoder", None)
        # The arguments JSONEncoder.iterencode passes for the library's encoder: markers
        # (none), default, string encoder, indent, key and item separators, sort_keys,
        # skipkeys, allow_nan.
        self._encode = None if make is None else make(
            None, self._encode_obj, json.encoder.encode_basestring, None, ":", ",",
            False, False, True)

    def encode(self, obj: Any) -> bytes:
        """``obj`` as the library's ``JSONTranscoder.encode`` writes it (UTF-8 JSON)."""
        if self._encode is None or isinstance(obj, str):
            return super().encode(obj)
        return "".join(self._encode(obj, 0)).encode("utf8")
