"""The command line's handling of bad settings (service/cli/app.py, ``main``)."""

from __future__ import annotations

import pytest

from tests.cli import vmledger


def test_bad_settings_end_any_command_with_one_line_naming_the_variable_and_no_values(
    tmp_path,
) -> None:
    done = vmledger("project", database_url="mysql://admin:hunter2@db/vm", cwd=tmp_path,
                    timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "VMLEDGER_DATABASE_URL: must start with sqlite:///, postgresql:// or postgres://"]
    assert "hunter2" not in done.stdout + done.stderr


@pytest.mark.parametrize("name, value, message", [
    # found by a tester: both passed "greater than 0", then overflowed a timedelta or a wait
    ("VMLEDGER_JOB_LEASE_S", "inf", "must be a finite number"),
    ("VMLEDGER_JOB_LEASE_S", "1e15", "must be a number of seconds up to 31,536,000 (a year)"),
    ("VMLEDGER_POSTGRES_LOCK_TIMEOUT_S", "99999999999",
     "must be a number of seconds up to 31,536,000 (a year)"),
    ("VMLEDGER_CHANGES_HEARTBEAT_S", "-inf", "must be a finite number"),
    # found by a tester: "Input should be greater than 0"
    ("VMLEDGER_JOB_LEASE_S", "nan", "must be a finite number"),
    ("VMLEDGER_DATABASE_RETRY_S", "nan", "must be a finite number"),
    # found by a tester: SQLite's 75-line "unable to open database file"
    ("VMLEDGER_DATABASE_URL", "sqlite:////nonexistent/dir/x.db",
     "names a file in /nonexistent/dir, which is not a directory that exists"),
])
def test_a_setting_past_what_it_can_mean_ends_the_command_in_one_line(
        tmp_path, name: str, value: str, message: str) -> None:
    done = vmledger("audit", "verify", env={name: value}, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"{name}: ") and message in line


@pytest.mark.parametrize("command", [["audit", "verify"], ["serve", "--port", "0"],
                                     ["changes"]], ids=lambda c: c[0])
def test_a_dotenv_that_is_not_utf8_ends_any_command_in_one_line_naming_it(
        tmp_path, command: list[str]) -> None:
    # tester: a latin-1 byte in the working directory's .env was a UnicodeDecodeError
    # traceback from every command
    (tmp_path / ".env").write_bytes(b"VMLEDGER_SIM_SERVERS=3\nX=caf\xe9\n")
    done = vmledger(*command, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (f".env ({tmp_path / '.env'}): is not UTF-8 text (byte 0xe9 at offset 28): "
                    "save it as UTF-8")


@pytest.mark.parametrize("name", ["tokens.toml", "tokens.json"])
def test_a_tokens_file_that_is_not_utf8_stops_serve_in_one_line_naming_it(
        tmp_path, name: str) -> None:
    # tester: a UnicodeDecodeError traceback (the read was guarded for OSError only)
    (tmp_path / name).write_bytes(b"\xff\xfe")
    done = vmledger("serve", "--port", "0", cwd=tmp_path, timeout=60,
                    env={"VMLEDGER_TOKENS_FILE": str(tmp_path / name)})
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (f"vmledger: tokens file {tmp_path / name}: is not UTF-8 text (byte 0xff "
                    "at offset 0): save it as UTF-8")


def test_a_ctrl_c_while_the_command_loads_ends_it_quietly_with_status_130(
        monkeypatch, capsys) -> None:
    # tester: Ctrl-C in the first ~1.5 s of any command (its imports) printed a
    # KeyboardInterrupt traceback; the entry point imports the command line inside its guard
    import service.cli
    import service.cli.app
    import service.cli.stop_signals

    def interrupted() -> None:
        raise KeyboardInterrupt

    # the console script's process only: in this one, commands run later give signals back
    monkeypatch.setattr(service.cli.stop_signals, "hold_until_exit", lambda: None)

    monkeypatch.setattr(service.cli.app, "main", interrupted)
    with pytest.raises(SystemExit) as ended:
        service.cli.main()
    assert ended.value.code == 130
    assert capsys.readouterr() == ("", "")


def test_the_console_script_imports_only_the_guarded_entry_point() -> None:
    from importlib.metadata import entry_points

    [script] = [e for e in entry_points(group="console_scripts") if e.name == "vmledger"]
    assert script.value == "service.cli:main"


def test_a_refusal_of_settings_together_names_vmledger_not_pydantic(tmp_path) -> None:
    # operator tester: "Value error, VMLEDGER_TOKENS and VMLEDGER_TOKENS_FILE are both set…"
    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text("")
    done = vmledger("audit", "verify", env={"VMLEDGER_TOKENS": "[]",
                                            "VMLEDGER_TOKENS_FILE": str(tokens_file)},
                    cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("vmledger: VMLEDGER_TOKENS and VMLEDGER_TOKENS_FILE are both set")


def test_a_postgres_pool_of_one_connection_is_refused_in_one_line() -> None:
    """Start-up holds its schema lock on one connection while it makes its tables on another:
    with ``VMLEDGER_POSTGRES_POOL_SIZE=1`` and no overflow ``serve`` ended in a traceback
    (status 3) and ``project`` waited for a connection (a tester). Two in all is allowed, and
    on SQLite the settings mean nothing and are not checked."""
    from pydantic import ValidationError

    from service.settings import Settings

    url = "postgresql://postgres@127.0.0.1:5432/vmledger"
    with pytest.raises(ValidationError, match="must be at least 2: a process holds its schema"):
        Settings(database_url=url, postgres_pool_size=1, postgres_max_overflow=0)
    assert Settings(database_url=url, postgres_pool_size=1, postgres_max_overflow=1)
    assert Settings(database_url="sqlite:///x.db", postgres_pool_size=1, postgres_max_overflow=0)


def test_an_unknown_vmledger_variable_is_named_with_the_setting_it_may_mean(tmp_path) -> None:
    """A typo of a setting's name was ignored without a word, its default used instead
    (operator tester): every command warns, in one line each, and goes on
    (docs/operations.md, "Settings"); the variables of the tests and CI are no typo."""
    done = vmledger("audit", "verify", env={
        "VMLEDGER_JOB_LEASES_S": "1", "VMLEDGER_NOTHING_LIKE_IT": "x",
        "VMLEDGER_REQUIRE_POSTGRES": "1", "VMLEDGER_TRACE": "/x"},
        database_url=f"sqlite:///{tmp_path / 'v.db'}", cwd=tmp_path, timeout=60)
    warnings = [line.split(": ", 1)[1] for line in done.stderr.splitlines()
                if "WARNING vmledger.settings" in line]
    assert warnings == [
        ("VMLEDGER_JOB_LEASES_S is not a setting and is ignored; did you mean "
         "VMLEDGER_JOB_LEASE_S?"),
        ("VMLEDGER_NOTHING_LIKE_IT is not a setting and is ignored (docs/operations.md, "
         "\"Settings\", lists them)")], done.stderr


def test_no_setting_is_checked_by_a_pattern_whose_refusal_prints_the_regex() -> None:
    # operator tester: VMLEDGER_METRICS_ADDRESS was refused with "String should match
    # pattern '^(\[[0-9A-Fa-f:.]+\]|…'"; a setting's form is checked by a validator of its
    # own whose refusal says the form in words (docs/operations.md, the settings table)
    from service.settings import Settings

    patterned = [name for name, field in Settings.model_fields.items()
                 if any(getattr(rule, "pattern", None) for rule in field.metadata)]
    assert patterned == []
