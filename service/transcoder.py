"""The event store's transcoder: the library's ``JSONTranscoder``, writing the same bytes with
one C encoder made once (``domain.compact_json``: every save encodes each event). Reading is
the library's own, unchanged. It also writes the canonical JSON that snapshot seals hash and
``audit verify`` compares.
"""

from __future__ import annotations

import json
from typing import Any

from eventsourcing.persistence import JSONTranscoder

from domain.compact_json import reused_encoder


class ReusedEncoderTranscoder(JSONTranscoder):
    """``JSONTranscoder`` whose ``encode`` reuses one C encoder with the settings of the
    library's ``self.encoder`` (compact separators, ``ensure_ascii=False``, the registered
    transcodings as ``default``), so the output is byte for byte the library's. Where
    ``json`` has no C accelerator it is the library's transcoder."""

    def __init__(self) -> None:
        super().__init__()
        self._encode = reused_encoder(self._encode_obj, ensure_ascii=False, sort_keys=False)
        self._canonical = reused_encoder(self._encode_obj, ensure_ascii=True, sort_keys=True)

    def encode(self, obj: Any) -> bytes:
        """``obj`` as the library's ``JSONTranscoder.encode`` writes it (UTF-8 JSON)."""
        if self._encode is None or isinstance(obj, str):
            return super().encode(obj)
        return self._encode(obj).encode("utf8")

    def canonical(self, obj: Any) -> str:
        """``obj`` in canonical JSON: the same transcodings as ``encode``, compact, with
        sorted keys and only ASCII. For objects whose dicts are keyed by strings (an event's
        or a snapshot's state) it is the text of
        ``json.dumps(json.loads(self.encode(obj)), sort_keys=True, separators=(",", ":"))``,
        in one encode."""
        if self._canonical is None:
            return json.dumps(obj, default=self._encode_obj, sort_keys=True,
                              separators=(",", ":"))
        return self._canonical(obj)
