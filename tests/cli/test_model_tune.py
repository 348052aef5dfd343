"""`gpusrv model tune MODEL_DIR` (issue 25): batch sizes and instance counts
measured in place. A model whose cost per row falls with the batch (wide
layers, whose weights every row reads again) gets a preferred batch larger
than one, and --write puts it into a config.json the server loads; under a
latency budget that only one row's run fits, a model gets a batch of one. Bad directories and budgets nothing fits are refused clearly."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
# A sanitizer build (tests/CMakeLists.txt): its timings say nothing of which
# batch is faster in a release build.
SANITIZED = os.environ.get("GPUSRV_SANITIZED") == "1"
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
sys.path.insert(0, os.path.join(ROOT, "tests", "api"))
from models import mlp  # noqa: E402
from test_serve import serving, request  # noqa: E402


def tune(*args):
    return subprocess.run([GPUSRV, "model", "tune", *args], capture_output=True, text=True,
                          timeout=600)


def entry(root, name, model, config=None):
    (root / name / "1").mkdir(parents=True)
    onnx.save(model, str(root / name / "1" / "model.onnx"))
    if config is not None:
        (root / name / "config.json").write_text(json.dumps(config))
    return root / name


def best_of(out):
    m = re.search(r"^best: batch (\d+) on (\d+) instance", out, re.M)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def rows(out):
    """(instances, batch) -> (rows/s, p50 ms, p99 ms) from the compute table."""
    table = {}
    compute = out.split("through the server's queue")[0]
    for line in compute.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and cells[0].isdigit() and cells[2] != "-":
            table[int(cells[0]), int(cells[1])] = tuple(float(c) for c in cells[2:5])
    return table


def queue_rows(out):
    """(max_queue_delay us, clients) -> (requests/s, p50 ms, p99 ms) from the
    table of the sweep through the server's queue."""
    table = {}
    for line in out.split("through the server's queue")[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0].isdigit():
            table[int(cells[0]), int(cells[1])] = tuple(float(c) for c in cells[2:5])
    return table


def test_a_model_whose_cost_per_row_falls_gets_a_larger_batch(tmp_path):
    repo = tmp_path / "models"
    d = entry(repo, "wide", mlp(hidden=(2048, 2048)), {"max_batch_size": 16, "warmup": True})
    p = tune(str(d), "--seconds", "0.3", "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    batch, instances = best_of(p.stdout)
    if not SANITIZED:  # there the few-rows product is instrumented, batch 1's oneDNN is not
        assert batch > 1, p.stdout
        table = rows(p.stdout)
        assert table[1, 1][0] < table[instances, batch][0], p.stdout  # more rows/s than batch 1
    config = json.loads((d / "config.json").read_text())
    assert config["max_batch_size"] == 16 and config["warmup"] is True  # kept
    assert config["dynamic_batching"]["preferred_batch_size"] == [batch]
    # The best batch served through the queue with 1 to 64 clients, for
    # four delays from none to a whole run. Without a budget every
    # concurrency counts: the delay written has the best mean share of the
    # best requests/s at each, or within 3% of that the lowest lone p50.
    queue = queue_rows(p.stdout)
    delays = sorted({d for d, _ in queue})
    clients = (1, 4, 16, 64)
    assert len(delays) == 4 and delays[0] == 0, p.stdout
    assert {c for _, c in queue} == set(clients), p.stdout
    chosen = config["dynamic_batching"]["max_queue_delay_microseconds"]
    assert chosen in delays
    assert f"best max_queue_delay: {chosen} us" in p.stdout
    most = {c: max(queue[d, c][0] for d in delays) for c in clients}
    score = {d: sum(queue[d, c][0] / most[c] for c in clients) / 4 for d in delays}
    # (The table's figures are rounded: a percent of slack either way.)
    assert score[chosen] >= 0.96 * max(score.values()), (score, p.stdout)
    clearly_near = [d for d in delays if score[d] >= 0.98 * max(score.values())]
    assert queue[chosen, 1][1] <= min(queue[d, 1][1] for d in clearly_near), p.stdout
    assert config["instance_group"] == [{"count": instances, "kind": "cpu", "devices": ["cpu0"]}]
    # What it wrote is a configuration the server serves.
    with serving(repo) as port:
        index = {m["name"]: m for m in json.loads(
            request(port, "POST", "/v2/repository/index", b"{}")[1])}
        assert index["wide"]["state"] == "READY", index["wide"]


def cube_cost_model():
    """Convolutions over N^3 images for a batch of N (the input tiled N^2
    times): batch 2 costs 8 times batch 1. So a budget of 3.5 times batch
    1's p50 separates them even where this machine's speed drifts by half
    between two sweeps, and its p99 runs far above its p50."""
    rng = np.random.default_rng(0)
    H = onnx.helper
    w1 = (rng.standard_normal((32, 3, 3, 3)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 32, 3, 3)) * 0.05).astype(np.float32)
    nodes = [H.make_node("Shape", ["x"], ["shape"], end=1),
             H.make_node("Mul", ["shape", "shape"], ["nn"]),
             H.make_node("Concat", ["nn", "ones"], ["reps"], axis=0),
             H.make_node("Tile", ["x", "reps"], ["tiled"]),
             H.make_node("Conv", ["tiled", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             H.make_node("Conv", ["c1", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2"),
             onnx.numpy_helper.from_array(np.ones(3, np.int64), "ones")]
    g = H.make_graph(nodes, "cube", [H.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                               ["N", 3, 96, 96])],
                     [H.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return H.make_model(g, opset_imports=[H.make_opsetid("", 17)])


def test_a_tight_latency_budget_gets_a_batch_of_one(tmp_path):
    d = entry(tmp_path, "cube", cube_cost_model(), {"max_batch_size": 2})
    p = tune(str(d), "--seconds", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    table = rows(p.stdout)
    one_p50, two_p50 = table[1, 1][1], table[1, 2][1]
    # The cost grows as meant (8x in compute; 4.7x was seen under ASan on a
    # busy machine): batch 2 stays well past the 3.5x budget below.
    assert two_p50 > 4 * one_p50, p.stdout
    p = tune(str(d), "--seconds", "1", "--latency-budget", f"{3.5 * one_p50:.3f}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert best_of(p.stdout)[0] == 1, p.stdout
    assert "over the latency budget" in p.stdout


def test_bad_directories_and_budgets(tmp_path):
    p = tune(str(tmp_path / "missing"))
    assert p.returncode == 1 and "no version directory" in p.stderr
    d = entry(tmp_path, "nobatch", mlp(), {"max_batch_size": 0})
    p = tune(str(d))
    assert p.returncode == 1 and "max_batch_size 0" in p.stderr
    d = entry(tmp_path, "broken", mlp())
    (d / "config.json").write_text("{not json")
    p = tune(str(d))
    assert p.returncode == 1 and "config.json, line 1" in p.stderr
    d = entry(tmp_path, "pbtxt", mlp())
    (d / "config.pbtxt").write_text("max_batch_size: 8\n")
    p = tune(str(d), "--write")
    assert p.returncode == 1 and "config.pbtxt" in p.stderr
    assert not (d / "config.json").exists()
    d = entry(tmp_path, "small", mlp(), {"max_batch_size": 4})
    p = tune(str(d), "--seconds", "0.1", "--latency-budget", "0.001")
    assert p.returncode == 1 and "no configuration fits the budgets" in p.stderr
    p = tune(str(d), "--seconds", "0.1", "--memory-budget", "1K")
    assert p.returncode == 1 and "no configuration fits the budgets" in p.stderr
    assert "over the memory budget" in p.stdout
    p = tune(str(d), "--latency-budget", "-1")
    assert p.returncode == 2


def test_a_linked_model_is_swept_through_the_queue_and_left_whole(tmp_path):
    """A version's model.onnx may be a link to a file of another name (as
    bench/ lays repositories out): the sweep through the server's queue
    serves it all the same, and leaves the file and its directory whole."""
    store = tmp_path / "store"
    store.mkdir()
    onnx.save(mlp(), str(store / "mlp-v3.onnx"))
    d = tmp_path / "models" / "linked"
    (d / "1").mkdir(parents=True)
    os.symlink(store / "mlp-v3.onnx", d / "1" / "model.onnx")
    (d / "config.json").write_text(json.dumps({"max_batch_size": 4}))
    p = tune(str(d), "--seconds", "0.05")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "best max_queue_delay:" in p.stdout, p.stdout + p.stderr
    assert len(queue_rows(p.stdout)) == 16
    assert (store / "mlp-v3.onnx").stat().st_size > 0
    assert os.path.islink(d / "1" / "model.onnx") and sorted(os.listdir(d / "1")) == ["model.onnx"]
