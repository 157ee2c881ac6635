"""What a VM's ``customer_metadata`` and ``tags`` may hold, as VMAPI rules it, in its words
(sdc-vmapi ``lib/common/validation.js``; upstream vms.full.test.js ``create_vm_tags_not_ok``
and ``change_with_bad_tags``, whose cases and texts these are): a ``customer_metadata`` key
ending in ``_pw``, a ``triton.`` tag VMAPI does not know or of the wrong type or value, and
(on an update) Docker's own tags. Nothing refused is appended."""

from __future__ import annotations

import pytest

from tests.api.helpers import (
    V2, assert_error, create_running_vm, get_vm, vm_body, wait_job,
)

# upstream's cases, and the texts it expects
BAD_TAGS = [
    ({"triton.foo": True}, 'Unrecognized special triton tag "triton.foo"'),
    ({"triton.cns.services": True},
     'Triton tag "triton.cns.services" value must be a string: true (boolean)'),
    ({"triton.cns.disable": "true"},
     'Triton tag "triton.cns.disable" value must be a boolean: "true" (string)'),
    ({"triton.cns.services": "foo,$#foo.bar"},
     'invalid "triton.cns.services" tag: Expected DNS name but "$" found.'),
    ({"triton.cns.services": "foo,_foo.bar"},
     'invalid "triton.cns.services" tag: Expected DNS name but "_" found.'),
    ({"triton.cns.services": "web:80:priority=70000"},
     'invalid "triton.cns.services" tag: service priority for web must be within the range '
     '0 - 65535'),
    ({"triton.cns.reverse_ptr": "a_b"},
     'invalid "triton.cns.reverse_ptr" tag: "a_b" is not DNS safe'),
    ({"triton.cmon.groups": "a,a"}, 'invalid "triton.cmon.groups" tag: contains duplicate '
                                    'group a'),
]
GOOD_TAGS = {"triton.cns.services": "web:8080:priority=10,_x._tcp", "triton.cns.disable": False,
             "triton.cns.reverse_ptr": "web.example.com", "triton.cmon.groups": "api,db",
             "triton.network.public": "external", "role": "web", "sdc_docker": True}


def _refused(response, field: str, message: str, top: str, status: int = 409) -> None:
    body = assert_error(response, status, "ValidationFailed")
    assert (body["message"], body["errors"]) == (
        top, [{"field": field, "code": "Invalid", "message": message}]), body


@pytest.mark.parametrize("tags, message", BAD_TAGS)
def test_create_refuses_a_triton_tag_vmapi_refuses(client, services, tags, message) -> None:
    head = services.commands.head_position()
    _refused(client.post("/vms", json=vm_body(tags=tags)), "tags", message,
             "Invalid VM parameters")
    _refused(client.post("/vms", json=vm_body(tags=tags), headers=V2), "tags", message,
             "Invalid VM parameters", 422)
    assert services.commands.head_position() == head


@pytest.mark.parametrize("tags, message", [
    *BAD_TAGS,
    ({"docker:label:com.docker.": "foo,_foo.bar"},
     'Special tag "docker:label:com.docker." not supported'),
    ({"sdc_docker": True}, 'Special tag "sdc_docker" not supported'),
])
def test_update_refuses_them_and_dockers_own_tags(client, services, tags, message) -> None:
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    _refused(client.post(f"/vms/{vm_uuid}", params={"action": "update"}, json={"tags": tags}),
             "tags", message, "Invalid VM update parameters")
    # the action in the body, as upstream sends it
    _refused(client.post(f"/vms/{vm_uuid}", json={"action": "update", "tags": tags}),
             "tags", message, "Invalid VM update parameters")
    assert services.commands.head_position() == head


def test_the_tags_vmapi_knows_are_taken_with_their_types(client) -> None:
    created = client.post("/vms", json=vm_body(tags=GOOD_TAGS))
    assert created.status_code == 202, created.text
    vm_uuid = created.json()["vm_uuid"]
    wait_job(client, created.json()["job_uuid"])
    assert get_vm(client, vm_uuid)["tags"] == GOOD_TAGS
    update = {key: value for key, value in GOOD_TAGS.items() if key != "sdc_docker"}
    response = client.post(f"/vms/{vm_uuid}", params={"action": "update"},
                           json={"tags": update})
    assert wait_job(client, response.json()["job_uuid"])["execution"] == "succeeded"
    assert get_vm(client, vm_uuid)["tags"] == update


@pytest.mark.parametrize("key", ["root_pw", "_pw", "admin_pw"])
def test_a_customer_metadata_key_ending_in_pw_is_forbidden(client, services, key) -> None:
    head = services.commands.head_position()
    metadata = {"foo": "bar", key: "secret"}
    _refused(client.post("/vms", json=vm_body(customer_metadata=metadata)),
             f"customer_metadata.{key}", "Forbidden Metadata Key", "Invalid VM parameters")
    vm_uuid = create_running_vm(client)
    head = services.commands.head_position()
    _refused(client.post(f"/vms/{vm_uuid}", params={"action": "update"},
                         json={"customer_metadata": metadata}),
             f"customer_metadata.{key}", "Forbidden Metadata Key",
             "Invalid VM update parameters")
    assert services.commands.head_position() == head


def test_pw_elsewhere_is_taken(client) -> None:
    # upstream's create_vm: a value holding "user_pw", and internal_metadata, are fine
    created = client.post("/vms", json=vm_body(
        customer_metadata={"credentials": '{"user_pw": "12345678"}', "pw_hint": "x",
                           "a_pw\n": "x"},
        internal_metadata={"root_pw": "secret"}))
    assert created.status_code == 202, created.text
