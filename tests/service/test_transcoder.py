"""The event store's transcoder (service/transcoder.py) writes the library's bytes."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from uuid import UUID

from eventsourcing.persistence import DatetimeAsISO, DecimalAsStr, JSONTranscoder, UUIDAsHex

from service.commands.application import VmLedger
from service.transcoder import ReusedEncoderTranscoder

VALUES = [
    {"timestamp": datetime(2026, 12, 1, 16, 0, tzinfo=UTC), "id": UUID(int=5),
     "price": Decimal("1.10"), "nested": [{"z": 1, "a": None}, (1, 2)]},
    ["é☃", 'a "quoted" \\ line\n', 1.5, 1e16, 2**70, True],
    "a bare string",
    {},
]


def library_transcoder() -> JSONTranscoder:
    transcoder = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    return transcoder


def test_it_encodes_byte_for_byte_as_the_librarys_json_transcoder_and_decodes_back():
    ours, theirs = ReusedEncoderTranscoder(), library_transcoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        ours.register(transcoding)
    for value in VALUES:
        encoded = ours.encode(value)
        assert encoded == theirs.encode(value), value
        assert ours.decode(encoded) == theirs.decode(encoded)


def test_the_event_store_uses_it_with_the_librarys_transcodings():
    app = VmLedger(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    assert isinstance(app.mapper.transcoder, ReusedEncoderTranscoder)
    assert app.mapper.transcoder.encode(VALUES[0]) == library_transcoder().encode(VALUES[0])
