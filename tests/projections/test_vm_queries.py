"""ListVms' tag and internal_metadata filters as ``VmFilter.where`` asks them: one grouped
query a table, whatever the number of pairs. A clause a pair reached SQLite's limit on an
expression's depth ("Expression tree is too large") at about 1,000 pairs, and on PostgreSQL
made the planner's work grow with each (docs/api.md bounds what a request may give)."""

from __future__ import annotations

from projections.vm_queries import Page, VmFilter
from tests.builders import create, settle


def _listed(services, vm_filter: VmFilter) -> list[str]:
    vms, _ = services.vms.list(vm_filter, Page())
    assert services.vms.count(vm_filter) == len(vms)
    return [vm["uuid"] for vm in vms]


def test_a_vm_matches_only_when_it_has_every_pair_of_both_kinds(services) -> None:
    both = create(services, tags={"role": "web", "tier": 1},
                  internal_metadata={"zone": "a"}).vm_uuid
    create(services, tags={"role": "web", "tier": 2}, internal_metadata={"zone": "a"})
    create(services, tags={"role": "web", "tier": 1}, internal_metadata={"zone": "b"})
    create(services, tags={"zone": "a", "role": "web", "tier": 1})  # zone as a tag, not metadata
    settle(services)
    wanted = VmFilter(tags={"role": "web", "tier": "1"}, internal_metadata={"zone": "a"})
    assert _listed(services, wanted) == [both]
    assert len(_listed(services, VmFilter(tags={"role": "web"}))) == 4


def test_a_thousand_pairs_are_one_query_on_either_backend(services) -> None:
    tags = {f"k{i}": "v" for i in range(1000)}
    create(services, tags={"k0": "v"})
    settle(services)
    assert _listed(services, VmFilter(tags=tags, internal_metadata=dict(tags))) == []
    assert len(_listed(services, VmFilter(tags={"k0": "v"}))) == 1
