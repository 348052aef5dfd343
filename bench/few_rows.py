"""bench/few_rows: small batches (1 to 32 rows) through models whose
products have large weights, the regime of a dynamic batcher under light
load: gpusrv's CPU engine (gs-bench-models) beside onnxruntime with the same
threads, same run. The weights are packed once when the plan is made
(src/engine/plan_weights.c, kernel src/hal/cpu/ops/sgemm_packed.c), as
onnxruntime prepacks them; oneDNN's sgemm packs B on every call.

Models: the MLP of tests/engine/models.py made wide (256-2048-2048-10, 18 MB
of weights, MatMul with B [k, n]), and the same as PyTorch exports a Linear
(Gemm with transB=1, B [n, k]).

Usage: .venv/bin/python bench/few_rows.py BUILD_DIR [--seconds S] [--threads 1,all]"""
import argparse
import importlib.util
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/models.py, under another name: tests/engine/models.py is "models".
_spec = importlib.util.spec_from_file_location("bench_models", os.path.join(HERE, "models.py"))
bench_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_models)
gs_bench, ort_bench = bench_models.gs_bench, bench_models.ort_bench

sys.path.insert(0, os.path.join(bench_models.ROOT, "tests", "engine"))
from models import mlp  # noqa: E402

BATCHES = (1, 2, 4, 8, 16, 32)


def linear_stack(widths=(256, 2048, 2048, 10)):
    """Gemm(transB=1) layers, as torch.onnx.export writes nn.Linear."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((b, a)) / np.sqrt(a))
                                          .astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        out = "y" if i == len(widths) - 2 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}" if out != "y"
                                                                        else out], transB=1))
        if out != "y":
            nodes.append(helper.make_node("Relu", [f"g{i}"], [out]))
        prev = out
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", widths[0]])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["batch", widths[-1]])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--threads", default="1,all")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as d:
        models = {"mlp-wide (MatMul)": os.path.join(d, "mlp.onnx"),
                  "linear (Gemm transB)": os.path.join(d, "linear.onnx")}
        m = mlp(hidden=(2048, 2048))
        m.ir_version = 8
        onnx.save(m, models["mlp-wide (MatMul)"])
        onnx.save(linear_stack(), models["linear (Gemm transB)"])
        for t in args.threads.split(","):
            threads = cores if t == "all" else int(t)
            print(f"\n--- {threads} thread(s) each: p50 latency (us) and rows/s ---")
            print("| model | batch | gpusrv p50 | ort p50 | ratio | gpusrv rows/s | ort rows/s |")
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            for name, path in models.items():
                for b in BATCHES:
                    g = gs_bench(args.build, path, b, args.seconds, None, threads)
                    o = ort_bench(path, b, args.seconds, threads)
                    print(f"| {name} | {b} | {g['p50_us']:.0f} | {o['p50_us']:.0f} | "
                          f"{g['p50_us'] / o['p50_us']:.2f} | {g['samples_per_s']:,.0f} | "
                          f"{o['samples_per_s']:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
