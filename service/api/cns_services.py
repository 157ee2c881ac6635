"""The ``triton.cns.services`` tag, checked as VMAPI checks it (the ``triton-tags`` 1.4.0
package's grammar and rules), with its messages word for word:
``invalid "triton.cns.services" tag: Expected DNS name but "_" found.``

The tag is services separated by commas, each ``NAME[:PORT][:KEY=VALUE]...``: a NAME is a DNS
name (a letter, digit or ``-``, then those and ``.``) or an SRV name (``_x._tcp``); PORT is
digits; KEY is ``[a-z][a-z0-9-]*``; VALUE anything but ``,`` and ``:``. A parse failure is
told as that package's PEG parser tells it: what was expected at the farthest position any
alternative reached, and what was found there. This is our own parser written to give the
same answers, not the package's generated code."""

from __future__ import annotations

import re
from typing import Any

from domain.json_input import cut

PREFIX = 'invalid "triton.cns.services" tag: '
_DNS_LABEL = re.compile(r"[a-zA-Z0-9-][a-zA-Z0-9-.]*|_[a-zA-Z0-9-]*\._(?:tcp|udp)")
_PORT = re.compile(r"[0-9]+")
_KEY = re.compile(r"[a-z][a-z0-9-]*")
_VALUE = re.compile(r"[^,:]+")
# The PEG rules' names, which it tells instead of what inside them failed
DNS_NAME, PORT_NAME = "DNS name", "integer (port number)"
KEY_NAME, VALUE_NAME = "property name", "property value"


class _Parser:
    """A recursive descent over the tag that records, as the PEG parser does, the farthest
    position a rule or literal failed at and what was expected there."""

    def __init__(self, text: str):
        self.text, self.at = text, 0
        self.farthest, self.expected = 0, []

    def fail(self, at: int, description: str) -> None:
        if at < self.farthest:
            return
        if at > self.farthest:
            self.farthest, self.expected = at, []
        self.expected.append(description)

    def rule(self, pattern: re.Pattern[str], name: str) -> str | None:
        found = pattern.match(self.text, self.at)
        if found is None:
            self.fail(self.at, name)
            return None
        self.at = found.end()
        return found.group()

    def literal(self, char: str) -> bool:
        if self.text.startswith(char, self.at):
            self.at += 1
            return True
        self.fail(self.at, f'"{char}"')
        return False

    def service(self) -> dict[str, str] | None:
        name = self.rule(_DNS_LABEL, DNS_NAME)
        if name is None:
            return None
        service = {"name": name.lower()}
        start = self.at
        if self.literal(":") and (port := self.rule(_PORT, PORT_NAME)) is not None:
            service["port"] = port
        else:
            self.at = start
        while True:
            start = self.at
            key = value = None
            if (self.literal(":") and (key := self.rule(_KEY, KEY_NAME)) is not None
                    and self.literal("=") and (value := self.rule(_VALUE, VALUE_NAME))):
                service[key] = value
            else:
                self.at = start
                return service

    def services(self) -> list[dict[str, str]] | str:
        first = self.service()
        if first is not None:
            found = [first]
            while True:
                start = self.at
                if self.literal(","):
                    service = self.service()
                    if service is not None:
                        found.append(service)
                        continue
                self.at = start
                break
            if self.at == len(self.text):
                return found
            self.fail(self.at, "end of input")
        return self.failure()

    def failure(self) -> str:
        expected = sorted(set(self.expected), key=_utf16)
        told = expected[0] if len(expected) == 1 else (
            ", ".join(expected[:-1]) + " or " + expected[-1])
        found = (f'"{_escaped(self.text[self.farthest])}"'
                 if self.farthest < len(self.text) else "end of input")
        return f"Expected {told} but {found} found."


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be")  # JavaScript compares strings by UTF-16 code units


def _escaped(char: str) -> str:
    """One character as the PEG parser's message writes it."""
    escapes = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
               "\r": "\\r"}
    if char in escapes:
        return escapes[char]
    code = ord(char)
    if code > 0xFFFF:  # JavaScript's charAt sees the first half of its surrogate pair
        code = 0xD800 + ((code - 0x10000) >> 10)
    if code <= 0x0F:
        return f"\\x0{code:X}"
    if code <= 0x1F or 0x80 <= code <= 0xFF:
        return f"\\x{code:X}"
    if 0x100 <= code <= 0xFFF:
        return f"\\u0{code:X}"
    if code >= 0x1000:
        return f"\\u{code:X}"
    return char


def js_parse_int(text: str) -> int | None:
    """JavaScript's ``parseInt(text, 10)``: leading blanks, a sign and the digits that follow
    (``"12abc"`` is 12); None for NaN."""
    found = re.match(r"\s*([+-]?)([0-9]+)", text)
    if found is None:
        return None
    return -int(found.group(2)) if found.group(1) == "-" else int(found.group(2))


def cns_services_problem(value: str) -> str | None:
    """VMAPI's message for a ``triton.cns.services`` value it refuses, or None."""
    services = _Parser(value).services()
    if isinstance(services, str):
        return PREFIX + services
    for service in services:
        problem = _service_problem(service)
        if problem is not None:
            return PREFIX + problem
    return None


def _service_problem(service: dict[str, Any]) -> str | None:
    name = service["name"]
    if not 1 <= len(_utf16(name)) // 2 <= 63:
        return f'service DNS name "{cut(name)}" must be 63 or fewer characters'
    if "port" in service:
        port = js_parse_int(service["port"])
        if port is None or not 1 <= port <= 65535:
            return f"service port number for {cut(name)} must be within the range 1 - 65535"
    for key, text in service.items():
        if key in ("name", "port"):
            continue
        if key not in ("priority", "weight"):
            return f'service property "{cut(key)}" is not a valid property name'
        number = js_parse_int(text)
        if number is None or not 0 <= number <= 65535:
            return f"service {key} for {cut(name)} must be within the range 0 - 65535"
    return None
