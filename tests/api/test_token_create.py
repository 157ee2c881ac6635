"""``vmledger token create``: every entry it prints is one the tokens file's loader takes, and
what the loader would refuse it refuses, with the loader's own words (issue: a tester's
entries stopped every process from starting)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.api.tokens import Tokens
from service.cli.app import cli

OWNER = "930896af-bf8c-48d4-885c-6573a94b1853"


def create(*args: str):
    return CliRunner().invoke(cli, ["token", "create", *args], env={"COLUMNS": "300"})


@pytest.mark.parametrize(("args", "complaint"), [
    (["--name", "z", "--role", "owner", "--owner-uuid", "bad"],
     "token 'z': owner_uuid is not a UUID"),
    (["--name", "z", "--role", "owner"],
     "token 'z': owner_uuid (a UUID) is required for role owner"),
    (["--name", "ag2", "--role", "agent", "--server-uuid", "nope"],
     "token 'ag2': server_uuid is not a UUID"),
    (["--name", "ag2", "--role", "agent"],
     "token 'ag2': server_uuid (a UUID) is required for role agent"),
    (["--name", "", "--role", "operator"], "name is required"),
    (["--name", "x", "--role", "root"], "role must be one of operator, owner, agent"),
    (["--name", "x", "--role", "operator", "--owner-uuid", OWNER],
     "owner_uuid is only for role owner"),
    (["--name", "x", "--role", "owner", "--owner-uuid", OWNER, "--server-uuid", OWNER],
     "server_uuid is only for role agent"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else "")
def test_an_entry_the_loader_would_refuse_is_refused_with_its_words(
        args: list[str], complaint: str) -> None:
    done = create(*args)
    assert done.exit_code == 2, done.output
    assert complaint in done.stderr, done.stderr
    assert done.stdout == "" and "[[tokens]]" not in done.stderr  # no token, no entry
    assert "Traceback" not in done.output


AWKWARD = ['a"b', "back\\slash", '\\"', '"""', "'single'", "Zoë 名前 🚀", "tab\there",
           "new\nline", "cr\rlf", "nul\x00", "del\x7f", "c1\x85\x9f", "\u2028sep",
           'a"\n[[tokens]]\nname = "forged', " ", "#comment"]


def test_every_printed_entry_appended_to_one_file_loads_as_given(tmp_path: Path) -> None:
    # found by a tester: name = "a"b" was written unescaped, invalid TOML
    tokens_file, tokens = tmp_path / "tokens.toml", {}
    for index, name in enumerate(AWKWARD):
        role = ["operator", "owner", "agent", "auditor", "analyst"][index % 5]
        bound = {"owner": ["--owner-uuid", OWNER.upper()],
                 "agent": ["--server-uuid", "{" + OWNER + "}"]}.get(role, [])
        done = create("--name", name, "--role", role, *bound)
        assert done.exit_code == 0, (name, done.output)
        with tokens_file.open("a") as appended:  # as docs/operations.md shows: 2>> tokens.toml
            appended.write(done.stderr)
        tokens[done.stdout.strip()] = (name, role, OWNER if bound else None)
    loaded = Tokens.load(tokens_file)
    for token, (name, role, bound_to) in tokens.items():
        principal = loaded.authenticate(f"Bearer {token}")
        assert (principal.name, principal.role) == (name, role)
        assert (principal.owner_uuid or principal.server_uuid) == bound_to


def test_a_name_no_tokens_file_can_hold_is_refused() -> None:
    # a lone surrogate (undecodable bytes in argv) has no UTF-8 form: no file could hold it
    done = create("--name", "bad\udcff", "--role", "operator")
    assert done.exit_code == 2, done.output
    assert done.stdout == "" and "Traceback" not in done.output
