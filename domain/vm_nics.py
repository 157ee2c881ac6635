"""A VM's NICs: each an address on a network (``domain/network.py`` holds the claim; the VM
holds the NIC). A mixin of ``domain.vm.Vm``; the events are named on it (``Vm.NicsAdded``).

A NIC is ``{mac, ip, netmask, gateway, network_uuid, primary}`` (VMAPI's NIC object). Exactly
one NIC of a VM is primary while it has any: the first, unless another is asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from domain.errors import ValidationError
from domain.events import Cause
from domain.json_input import cut
from domain.states import JobName
from domain.vm_events import VmEvent

# A MAC address as written: six pairs of hex digits, colon-separated, in either case.
_MAC = re.compile(r"[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}")


class NicsAdded(VmEvent):
    """The VM has these NICs, whose addresses were claimed on their networks in the same
    transaction."""

    TOPIC = "vm.nics_added"
    nics: list[dict[str, Any]]

    def apply(self, vm: Nics) -> None:
        current = list(getattr(vm, "nics", []))
        if any(nic["primary"] for nic in self.nics):
            current = [{**nic, "primary": False} for nic in current]
        vm.nics = current + [dict(nic) for nic in self.nics]


class NicsRemoved(VmEvent):
    """The VM no longer has the NICs ``nics`` (as they were); their addresses were released
    in the same transaction."""

    TOPIC = "vm.nics_removed"
    nics: list[dict[str, Any]]

    def apply(self, vm: Nics) -> None:
        gone = {nic["mac"] for nic in self.nics}
        left = [nic for nic in getattr(vm, "nics", []) if nic["mac"] not in gone]
        if left and not any(nic["primary"] for nic in left):
            left[0] = {**left[0], "primary": True}
        vm.nics = left


class AddressesReleased(VmEvent):
    """A destroyed VM's NIC addresses, which its ``Destroyed`` kept (``addresses_kept``), were
    released in the same transaction (the networks' ``AddressReleased``): its ``fence`` job
    had fenced every server a copy may be on. ``nics``: the NICs whose addresses went back;
    the VM's ``nics`` still show what it had."""

    TOPIC = "vm.addresses_released"
    nics: list[dict[str, Any]]

    def apply(self, vm: Nics) -> None:
        vm.addresses_kept = False


class Nics:
    """NIC commands."""

    trigger_event: Any
    NicsAdded: Any
    NicsRemoved: Any
    AddressesReleased: Any
    addresses_kept: bool

    @property
    def nic_list(self) -> list[dict[str, Any]]:
        """The VM's NICs (none for a VM recorded before NICs existed)."""
        return list(getattr(self, "nics", []))

    def add_nics(self, nics: list[dict[str, Any]], *, cause: Cause) -> None:
        """Record NICs whose addresses are claimed; the first is primary when the VM has no
        NIC yet and none is asked to be."""
        if not nics:
            return
        nics = [dict(nic) for nic in nics]
        if not self.nic_list and not any(nic["primary"] for nic in nics):
            nics[0]["primary"] = True
        self.trigger_event(self.NicsAdded, cause=cause, nics=nics)

    def give_back_nics(self, *, cause: Cause) -> list[dict[str, Any]]:
        """Remove every NIC the VM holds, in one ``NicsRemoved``; returns them, and records
        nothing when it holds none. Only for a VM whose provision failed with every server a
        copy may be on answering it has none (``Lifecycle.record_provision_failed``, VMAPI
        TRITON-394), so nothing uses the addresses, which the change loop releases in the same
        transaction (service/commands/networks.py)."""
        held = self.nic_list
        if held:
            self.trigger_event(self.NicsRemoved, cause=cause, nics=held)
        return held

    def release_kept_addresses(self, *, cause: Cause) -> list[dict[str, Any]]:
        """Release the addresses of the NICs a destroyed VM kept (``Destroyed.addresses_kept``),
        in one ``AddressesReleased``; the change loop releases them on their networks in the
        same transaction (service/commands/networks.py). Only for its ``fence`` job, once every
        server a copy may be on is fenced (service/jobs/fence_job.py). Returns the NICs; none,
        and nothing recorded, when no address is kept."""
        held = self.nic_list if self.addresses_kept else []
        if held:
            self.trigger_event(self.AddressesReleased, cause=cause, nics=held)
        return held

    def nics_to_remove(self, macs: list[str]) -> list[dict[str, Any]]:
        """The NICs ``macs`` names, each once, in the order asked (what a ``remove_nics`` job
        will remove; nothing is recorded). Raises ``ValidationError`` (field ``macs``) naming a
        MAC the VM has no NIC with (saying so of one that is no MAC address), or when ``macs``
        is empty."""
        have = {nic["mac"]: nic for nic in self.nic_list}
        # each named once, as the NICs are: a MAC asked twice is not two problems
        unknown = [mac for mac in dict.fromkeys(macs) if mac not in have]
        malformed = [mac for mac in unknown if not _MAC.fullmatch(mac)]
        if malformed:  # say what is wrong with it, not only that no NIC has it (a tester's)
            raise ValidationError("macs", "Invalid", f"not a MAC address: "
                                  f"{', '.join(map(cut, malformed))} (six pairs of hex digits, as "
                                  "90:b8:d0:c0:ff:ee)")
        if unknown or not macs:
            raise ValidationError("macs", "Invalid",
                                  f"the VM has no NIC {', '.join(map(cut, unknown))}" if unknown
                                  else "name at least one MAC")
        return [have[mac] for mac in dict.fromkeys(macs)]

    def remove_nics(self, macs: list[str], *, cause: Cause) -> list[dict[str, Any]]:
        """Record that the NICs ``macs`` are gone; returns them. Raises ``ValidationError``
        as ``nics_to_remove`` does."""
        removed = self.nics_to_remove(macs)
        self.trigger_event(self.NicsRemoved, cause=cause, nics=removed)
        return removed

    def give_back_added_nics(self, job: Mapping[str, Any], *, cause: Cause
                             ) -> list[dict[str, Any]]:
        """Remove the NICs an ``add_nics`` ``job`` recorded when it was asked for
        (service/commands/nic_actions.py), as its end without applying them: it failed, or it
        was canceled before it ran. The change loop releases their addresses in the same
        transaction (service/commands/networks.py), so nothing stays claimed for a NIC no
        node has. Returns the NICs removed: none for another job, and none the VM no longer
        has (removed since by another job)."""
        if job["name"] != JobName.ADD_NICS:
            return []
        return self.remove_nics_it_has(
            [nic["mac"] for nic in job["params"].get("args", {}).get("nics", [])], cause=cause)

    def macs_it_has(self, macs: list[str]) -> list[str]:
        """Those of ``macs`` the VM has a NIC with, each once, in the order given (nothing is
        recorded). For a job that asked first: another job may have removed some since (a
        ``remove_nics`` job's success, a failed or canceled ``add_nics``'s give-back)."""
        have = {nic["mac"] for nic in self.nic_list}
        return [mac for mac in dict.fromkeys(macs) if mac in have]

    def remove_nics_it_has(self, macs: list[str], *, cause: Cause) -> list[dict[str, Any]]:
        """Record that those of the NICs ``macs`` the VM still has (``macs_it_has``) are
        gone; returns them, and records nothing when it has none of them."""
        present = self.macs_it_has(macs)
        return self.remove_nics(present, cause=cause) if present else []
