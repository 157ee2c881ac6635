"""Tokens from the environment (``VMLEDGER_TOKENS``, JSON) as well as from a file
(docs/operations.md, "Tokens and roles"): read through ``Settings``, they authenticate like
the file's; a malformed value is refused naming the problem; both sources at once are refused;
and with no tokens at all ``serve`` still listens on loopback only (api.md, "Roles")."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.api.app import create_app, refuse_open_bind_without_tokens
from service.api.tokens import TokenFileError, Tokens
from service.settings import Settings
from tests.api.helpers import OWNER, assert_error, vm_body

AUDITOR_TOKEN = "env-token-of-the-auditor"
OWNER_TOKEN = "env-token-of-the-owner"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


ENTRIES = [
    {"name": "env-auditor", "role": "auditor", "sha256": _sha(AUDITOR_TOKEN)},
    {"name": "env-owner", "role": "owner", "owner_uuid": OWNER, "sha256": _sha(OWNER_TOKEN)},
]


@pytest.fixture(autouse=True)
def no_token_settings_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the token variables it means; none leaks in from the caller's shell."""
    monkeypatch.delenv("VMLEDGER_TOKENS", raising=False)
    monkeypatch.delenv("VMLEDGER_TOKENS_FILE", raising=False)


def env_settings(monkeypatch: pytest.MonkeyPatch, value: str | None, **fields) -> Settings:
    """Settings read from the environment with ``VMLEDGER_TOKENS=value`` (unset if None)."""
    if value is not None:
        monkeypatch.setenv("VMLEDGER_TOKENS", value)
    return Settings(**fields)


def test_a_token_from_vmledger_tokens_authenticates_with_its_role(services, monkeypatch) -> None:
    settings = env_settings(monkeypatch, json.dumps(ENTRIES),
                            database_url=services.settings.database_url)
    assert settings.tokens is not None and settings.tokens_file is None
    app = create_app(settings, services=services, background=True)
    auditor = {"Authorization": f"Bearer {AUDITOR_TOKEN}"}
    owner = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    with TestClient(app) as http:
        assert http.get("/servers", headers=auditor).status_code == 200
        assert_error(http.post("/vms", json=vm_body(), headers=auditor), 403, "Forbidden")
        assert_error(http.get("/servers"), 401, "Unauthorized")
        assert_error(http.get("/servers", headers={"Authorization": "Bearer nope"}),
                     401, "Unauthorized")
        created = http.post("/vms", json=vm_body(), headers=owner)
        assert created.status_code == 202
        history = http.get(f"/vms/{created.json()['vm_uuid']}/history", headers=owner).json()
        assert history[0]["cause"]["actor"] == "env-owner"
        # An owner token is scoped to its owner: it may not read the servers.
        assert_error(http.get("/servers", headers=owner), 403, "Forbidden")


def test_the_object_form_of_a_json_tokens_file_is_accepted_too(monkeypatch) -> None:
    settings = env_settings(monkeypatch, json.dumps({"tokens": ENTRIES}))
    principal = Tokens.from_settings(settings).authenticate(f"Bearer {AUDITOR_TOKEN}")
    assert (principal.name, principal.role) == ("env-auditor", "auditor")


@pytest.mark.parametrize(("value", "complaint"), [
    ('[{"name": "x", "role": "auditor"', "VMLEDGER_TOKENS: not valid JSON"),
    ("", "VMLEDGER_TOKENS: is empty"),
    ("[]", "VMLEDGER_TOKENS: no tokens"),
    ('"a string"', "VMLEDGER_TOKENS: no tokens"),
    (json.dumps([{"name": "x", "role": "auditor", "sha256": "abc"}]),
     "VMLEDGER_TOKENS: token 'x': sha256 must be"),
    (json.dumps([{"name": "x", "role": "root", "sha256": _sha("t")}]),
     "VMLEDGER_TOKENS: token 'x': role must be one of"),
    (json.dumps([ENTRIES[0], ENTRIES[0]]), r"VMLEDGER_TOKENS: duplicate names \['env-auditor'\]"),
])
def test_a_malformed_vmledger_tokens_is_refused_naming_the_problem(
    monkeypatch, capsys, value: str, complaint: str
) -> None:
    settings = env_settings(monkeypatch, value)
    with pytest.raises(TokenFileError, match=complaint):
        Tokens.from_settings(settings)
    with pytest.raises(TokenFileError, match=complaint):
        create_app(settings)
    # `serve` checks before it starts: a one-line message, whatever the host, status 2
    with pytest.raises(SystemExit) as ended:
        refuse_open_bind_without_tokens(settings, "127.0.0.1")
    assert ended.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert re.search(complaint, line), line


def test_serve_with_a_malformed_vmledger_tokens_exits_with_the_message(monkeypatch) -> None:
    from typer.testing import CliRunner

    from service.cli.app import cli

    monkeypatch.setenv("VMLEDGER_TOKENS", "[{oops}]")
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2  # a bad setting's status
    assert "VMLEDGER_TOKENS: not valid JSON" in result.output


def test_tokens_in_both_the_environment_and_a_file_are_refused(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VMLEDGER_TOKENS_FILE", str(tmp_path / "tokens.toml"))
    with pytest.raises(ValidationError, match="VMLEDGER_TOKENS and VMLEDGER_TOKENS_FILE are "
                                              "both set"):
        env_settings(monkeypatch, json.dumps(ENTRIES))


def test_with_no_tokens_serve_listens_on_loopback_only(monkeypatch, capsys) -> None:
    settings = env_settings(monkeypatch, None)
    assert not settings.tokens_configured and Tokens.from_settings(settings).open
    for host in ("127.0.0.1", "::1", "localhost"):
        refuse_open_bind_without_tokens(settings, host)  # allowed
    for host in ("0.0.0.0", "10.1.2.3", "::", "vmledger.example"):
        with pytest.raises(SystemExit) as refused:
            refuse_open_bind_without_tokens(settings, host)
        # status 2 and "vmledger: …", as every refused setting (it was 1, unprefixed)
        assert refused.value.code == 2
        assert capsys.readouterr().err.startswith(
            f"vmledger: refusing to listen on {host}: no tokens")
    # Tokens from the environment lift the rule, as a tokens file does.
    with_env = env_settings(monkeypatch, json.dumps(ENTRIES))
    refuse_open_bind_without_tokens(with_env, "0.0.0.0")
