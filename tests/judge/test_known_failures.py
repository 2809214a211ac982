"""Which builds a declared failure's version range matches: a range is about the code a build ships."""

import pytest

from harness.judge.known_failures import KnownFailure, torch_version_matches

FOUND_RANGE = ">=2.13.0,<=2.14.0"  # the found torch_npu bugs' declaration (cases/found_torch_npu.py)


@pytest.mark.parametrize(
    "version, spec, matches",
    [
        ("2.13.0", FOUND_RANGE, True),
        ("2.14.0", FOUND_RANGE, True),
        # torch_npu's pre-release on the index, as its version.py spells it and as PEP 440 normalizes it: it ships
        # 2.13.0's code, which PEP 440 alone sorts before 2.13.0 and every declared range left out.
        ("2.13.0.rc1", FOUND_RANGE, True),
        ("2.13.0rc1", FOUND_RANGE, True),
        ("2.13.0.dev0+g1a2b3c4", FOUND_RANGE, True),
        ("2.13.0rc1", "<2.13.0", False),
        # A bound naming a pre-release compares exactly: a bug that came in after 2.13.0rc1.
        ("2.13.0.rc1", ">2.13.0rc1,<=2.14.0", False),
        ("2.13.0", ">2.13.0rc1,<=2.14.0", True),
        ("2.13.0rc2", ">2.13.0rc1", True),
        ("2.12.0", FOUND_RANGE, False),
        ("2.15.0.dev0+g1a2b3c4", FOUND_RANGE, False),  # a build of master: 2.15's code, past the range
        ("2.14.0.post3", FOUND_RANGE, False),  # a post release is a later build, with fixes of its own
        ("2.13.0+cpu", ">=2.11,<2.14", True),  # a local label is no part of the comparison
        ("2.14.0+cpu", "<=2.14.0", True),
        ("2.14.0+cpu", ">=2.11,<2.14", False),
        ("2.13.1", "2.13", True),
        ("2.13.0rc1", "2.13", True),
        ("2.14.0", "2.13", False),
        ("2.14.0+surrogate", FOUND_RANGE, False),  # a stand-in's own version: no torch_npu code ran
        ("unknown", FOUND_RANGE, False),  # a checkout without a version: no release range names it
    ],
)
def test_a_version_range_matches_the_builds_that_ship_its_code(version, spec, matches):
    assert torch_version_matches(version, spec) is matches


def test_a_found_bugs_declaration_covers_the_pre_release_that_ships_the_same_code():
    known = KnownFailure("rsplit", npu_backend="triton_experimental", torch_npu=FOUND_RANGE)
    assert known.matches(npu_backend="triton_experimental", torch_npu="2.13.0.rc1")
    assert not known.matches(npu_backend="default", torch_npu="2.13.0.rc1")
    assert not known.matches(npu_backend="triton_experimental", torch_npu=None)
