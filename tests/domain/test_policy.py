"""Persistence policies (domain/policy.py): presets, rows set one by one, and the responses
each happening can take."""

from __future__ import annotations

import uuid

import pytest

from domain import policy
from domain.errors import ValidationError
from domain.policy import CARRIED_OUT, PRESETS, Happening, Response
from domain.vm import Vm
from tests.builders import OWNER, cause


def test_every_preset_asks_only_for_responses_carried_out():
    for preset in PRESETS.values():
        assert all(response in CARRIED_OUT[happening] for happening, response in preset.items())


def test_a_row_set_one_by_one_overrides_its_preset_and_the_rest_follow_it():
    rows = {"preset": "ephemeral", "guest_crash": "restart"}
    assert policy.validate(rows) == rows
    assert policy.response(rows, Happening.GUEST_CRASH) is Response.RESTART
    assert policy.response(rows, Happening.HOST_REBOOT) is Response.DESTROY
    assert policy.response({"host_reboot": "stay_stopped"},
                           Happening.GUEST_CRASH) is Response.RESTART  # default preset


@pytest.mark.parametrize("rows", [{"guest_shutdown": "restart"}, {"agent_forgot": "destroy"},
                                  {"host_reboot": "quarantine"}, {"guest_crash": "nope"},
                                  {"preset": "nope"}, {"nope": "restart"}, "nope", 5])
def test_a_vm_is_not_created_with_a_policy_that_would_not_be_carried_out(rows):
    with pytest.raises(ValidationError) as refused:
        Vm.create(vm_uuid=uuid.uuid4(), owner_uuid=OWNER, brand="bhyve", ram=256,
                  provision_job_uuid=str(uuid.uuid4()), cause=cause(), persistence=rows)
    assert refused.value.errors[0]["field"] == "persistence"
