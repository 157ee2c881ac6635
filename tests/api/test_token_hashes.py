"""One token, one entry: two entries with the same SHA-256 are refused at load, as two with
the same name are (docs/operations.md, "Tokens and roles"; a tester: the same hash given
twice, the last entry silently decided the token's role, and ``serve`` started with no
warning)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.api.tokens import TokenFileError, Tokens
from service.cli.app import cli

TOKEN = "one-token-given-twice"
DIGEST = hashlib.sha256(TOKEN.encode()).hexdigest()


@pytest.fixture(autouse=True)
def no_token_settings_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the token variables it means; none leaks in from the caller's shell."""
    monkeypatch.delenv("VMLEDGER_TOKENS", raising=False)
    monkeypatch.delenv("VMLEDGER_TOKENS_FILE", raising=False)


def toml_entry(name: str, role: str, digest: str) -> str:
    return f'[[tokens]]\nname = "{name}"\nrole = "{role}"\nsha256 = "{digest}"\n'


# the same hash in either order, and in upper case (the same 32 bytes)
@pytest.mark.parametrize(("first", "second"), [
    (("b", "analyst", DIGEST), ("a", "operator", DIGEST)),
    (("a", "operator", DIGEST), ("b", "analyst", DIGEST)),
    (("b", "analyst", DIGEST), ("a", "operator", DIGEST.upper())),
])
def test_a_tokens_file_giving_one_hash_twice_is_refused_naming_both_entries(
        tmp_path: Path, first: tuple[str, str, str], second: tuple[str, str, str]) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(toml_entry(*first) + toml_entry(*second))
    with pytest.raises(TokenFileError) as refused:
        Tokens.load(path)
    assert str(refused.value) == (f"tokens file {path}: duplicate sha256: tokens "
                                  f"{first[0]!r} and {second[0]!r} have the same hash "
                                  "(each token needs an entry of its own)")


def test_vmledger_tokens_giving_one_hash_twice_is_refused_too() -> None:
    entries = [{"name": "b", "role": "analyst", "sha256": DIGEST},
               {"name": "c", "role": "auditor", "sha256": "0" * 64},
               {"name": "a", "role": "operator", "sha256": DIGEST}]
    with pytest.raises(TokenFileError, match=r"^VMLEDGER_TOKENS: duplicate sha256: tokens "
                                             r"'b' and 'a' have the same hash"):
        Tokens.from_json(json.dumps(entries), source="VMLEDGER_TOKENS")


def test_serve_with_one_hash_twice_stops_at_start_up_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(toml_entry("b", "analyst", DIGEST) + toml_entry("a", "operator", DIGEST))
    monkeypatch.setenv("VMLEDGER_TOKENS_FILE", str(path))
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line == (f"vmledger: tokens file {path}: duplicate sha256: tokens 'b' and 'a' "
                    "have the same hash (each token needs an entry of its own)")
