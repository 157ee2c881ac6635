"""A signal that stops ``vmledger rebuild`` while it decodes or folds an event (its handler
raises ``CommandStopped`` wherever the main thread is) ends the rebuild as a stop, never as
damage to the log: the damage checks around decoding and folding took it for an event that
cannot be read ("stream … has an unreadable event at version 8 (CommandStopped: SIGTERM):
the log needs repair") and sent an operator to repair an intact log (operator tester)."""

from __future__ import annotations

import signal

import pytest

from domain.vm import Vm
from service.cli.stop_signals import CommandStopped
from tests.builders import a_mix_of_commands_and_jobs


def _stop_on_the_third_call(original):
    calls = []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise CommandStopped(signal.SIGTERM)
        return original(*args, **kwargs)

    return stopping


def test_a_stop_while_decoding_is_a_stop(services, monkeypatch):
    a_mix_of_commands_and_jobs(services)
    transcoder = services.app.mapper.transcoder
    monkeypatch.setattr(transcoder, "decode", _stop_on_the_third_call(transcoder.decode))
    with pytest.raises(CommandStopped):
        services.projections.rebuild()


def test_a_stop_while_folding_is_a_stop(services, monkeypatch):
    a_mix_of_commands_and_jobs(services)
    monkeypatch.setattr(Vm.Created, "mutate", _stop_on_the_third_call(Vm.Created.mutate))
    with pytest.raises(CommandStopped):
        services.projections.rebuild()


@pytest.mark.parametrize("where", ["decoding", "folding"])
def test_vmledger_rebuild_stopped_there_ends_as_a_stop_in_one_line(
        services, settings, monkeypatch, where):
    from typer.testing import CliRunner

    from service.cli.app import cli
    from service.transcoder import ReusedEncoderTranscoder

    a_mix_of_commands_and_jobs(services)
    if where == "decoding":
        monkeypatch.setattr(ReusedEncoderTranscoder, "decode",
                            _stop_on_the_third_call(ReusedEncoderTranscoder.decode))
    else:
        monkeypatch.setattr(Vm.Created, "mutate", _stop_on_the_third_call(Vm.Created.mutate))
    monkeypatch.setenv("VMLEDGER_DATABASE_URL", settings.database_url)
    done = CliRunner().invoke(cli, ["rebuild"])
    assert done.exit_code == 128 + signal.SIGTERM, done.output
    assert "vmledger rebuild: stopped by SIGTERM: a read model not yet switched is as it was" \
        in done.output
    assert "needs repair" not in done.output and "Traceback" not in done.output
