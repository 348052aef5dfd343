"""The ONNX project's backend node tests (onnx_node_cases.py) through
`gpusrv model run`. Every case passes unless its set's list of expected
failures (onnx_node_expected_failures*.txt) names it, with its reason; a listed case must still end as listed (refused
with a clear error, or the one known wrong result), never crash, and one
that passes must leave the list, which only shrinks."""
import os

import pytest

import onnx_node_cases as cases

NAMES = cases.case_names()
EXPECTED = cases.read_expected_failures()


@pytest.fixture(scope="module")
def results():
    # Two cores: four gpusrv processes keep both busy while others start.
    return cases.run_all(NAMES, workers=int(os.environ.get("GSTEST_NODE_WORKERS", "4")))


def test_the_cases_are_there():
    least = 1000 if cases.NODE_SET == "1.17" else 500  # a newer set: what changed since
    assert len(NAMES) > least, f"only {len(NAMES)} node cases under {cases.NODE_DIR}"


def test_the_list_names_only_cases():
    unknown = sorted(set(EXPECTED) - set(NAMES))
    assert not unknown, f"listed but not a case: {unknown}"


@pytest.mark.parametrize("name", NAMES)
def test_node_case(results, name):
    ending, detail = results[name]
    assert ending != "crash", f"{name}: {detail}"
    listed = EXPECTED.get(name)
    if listed is None:
        assert ending == "pass", f"{name} {ending}: {detail}"
        return
    kind, _, reason = listed.partition(" ")
    assert ending != "pass", f"{name} passes now: remove it from {cases.EXPECTED_FAILURES}"
    assert ending == kind, f"{name} is listed as {kind} ({reason}) but ended {ending}: {detail}"
