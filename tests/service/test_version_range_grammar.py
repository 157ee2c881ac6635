"""``Accept-Version``'s grammar beyond what a range admits (api.md, "Versions"): an
``||`` alternative that is not a range refuses the whole header, as node-semver (VMAPI's
restify) throws on any comparator set it cannot read (a tester: ``garbage || 2`` was served
version 2); and build metadata after a full version is read and ignored, as node-semver
reads it (``2.0.0+build`` is ``2.0.0``)."""

from __future__ import annotations

import pytest

from service.commands.version_ranges import InvalidVersionError, negotiate

#: Each is InvalidVersion alone: not a range this service reads
NOT_A_RANGE = ("garbage", "1 - 2", "2.0.0-beta", "~3beta", "2+build", "2.0+build",
               "2.0.0+", "2.0.0+a..b", "2.0.0+a+b", "2.0.0 +build", "*+build", "2.0.0+é")


@pytest.mark.parametrize("header", NOT_A_RANGE)
def test_each_piece_that_is_not_a_range_is_refused_alone(header):
    with pytest.raises(InvalidVersionError):
        negotiate(header)


@pytest.mark.parametrize("piece", NOT_A_RANGE)
@pytest.mark.parametrize("form", ["{} || 2", "2 || {}", "~2 || {} || 1", "{} ||",
                                  "|| {}", "x || {}", "2 {}", "{} x"])
def test_an_alternative_that_is_not_a_range_refuses_the_whole_header(form, piece):
    header = form.format(piece)
    with pytest.raises(InvalidVersionError) as refused:
        negotiate(header)
    assert refused.value.requested == header


@pytest.mark.parametrize(("header", "served"), [
    ("2.0.0+build", "2.0.0"), ("1.0.0+build.7", "1.0.0"), ("=2.0.0+b-1.x", "2.0.0"),
    ("~2.0.0+build", "2.0.0"), ("^1.0.0+001", "1.0.0"),
    (">=1.0.0+build", "2.0.0"), ("<2.0.0+build", "1.0.0"), ("2.x.x+build", "2.0.0"),
    ("1.0.x+meta-data", "1.0.0"), ("x.x.x+build", "1.0.0"), ("9.16.0+build", "1.0.0"),
    ("2.0.0+build || 1.0.0+other", "2.0.0"), (">=1.0.0+a <2.0.0+b", "1.0.0"),
])
def test_build_metadata_after_a_full_version_is_read_and_ignored(header, served):
    assert negotiate(header) == served


def test_build_metadata_does_not_make_an_unsatisfiable_range_satisfiable():
    for header in ("2.1.0+build", "3.0.0+build", "2.0.1+build", "<1.0.0+build"):
        with pytest.raises(InvalidVersionError):
            negotiate(header)
