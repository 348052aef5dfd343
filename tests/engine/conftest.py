"""Lets the engine tests import their helpers (gsonnx, models) by name."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    """Skip, with the reason, when the device under test is not on this machine."""
    import json
    import subprocess
    import pytest
    device = os.environ.get("GSTEST_DEVICE")
    if not device:
        return
    gpusrv = os.environ.get("GPUSRV_BIN", os.path.join(os.path.dirname(__file__), "..", "..",
                                                        "build", "gpusrv"))
    smi = subprocess.run([gpusrv, "smi", "--json"], capture_output=True, text=True)
    try:
        ids = [d["id"] for d in json.loads(smi.stdout)["devices"]]
    except (ValueError, KeyError):
        return
    if device not in ids:
        why = f"device {device} is not on this machine (devices: {ids})"
        if os.environ.get("GSTEST_REQUIRE_DEVICE") == "1":  # known installed: a failure
            pytest.exit(f"{why}; gpusrv smi says: {smi.stderr.strip()}", returncode=1)
        skip = pytest.mark.skip(reason=why)
        for item in items:
            item.add_marker(skip)
