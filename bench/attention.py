"""bench/attention: one attention block as torch.onnx writes it (Q and Kᵀ
each scaled, Kᵀ by a Transpose, a key-padding mask added, Softmax, the
product with V), 12 heads of 64, at sequence lengths 128, 512 and 1024.
gpusrv runs it as one Attention step (src/engine/plan_attention.c); the
same graph with the probabilities also an output cannot be fused, and runs
op by op: both beside onnxruntime at the same thread count, in one run.
Prints p50 latency and the plan's arena (the memory between steps).

Usage: .venv/bin/python bench/attention.py BUILD_DIR [--seconds S] [--threads 1,2]"""
import argparse
import importlib.util
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# bench/models.py's timing, loaded under another name: it imports the tests' own models.py.
_spec = importlib.util.spec_from_file_location(
    "bench_models", os.path.join(os.path.dirname(os.path.abspath(__file__)), "models.py"))
bench_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_models)
gs_bench, ort_bench = bench_models.gs_bench, bench_models.ort_bench

HEADS, HEAD = 12, 64


def block(seq, probabilities_out):
    """The block for one image; the batch is dynamic."""
    s = numpy_helper.from_array(np.array((1.0 / np.sqrt(HEAD)) ** 0.5, np.float32), "s")
    mask = np.zeros((1, 1, 1, seq), np.float32)
    mask[..., seq * 3 // 4:] = -1e9  # the last quarter is padding
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["q", "s"], ["qs"]),
             helper.make_node("Mul", ["kt", "s"], ["kts"]),
             helper.make_node("MatMul", ["qs", "kts"], ["scores"]),
             helper.make_node("Add", ["scores", "mask"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", HEADS, seq, HEAD])
           for n in ("q", "k", "v")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if probabilities_out:
        outs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "attention", ins, outs,
                          [s, numpy_helper.from_array(mask, "mask")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seqs", default="128,512,1024")
    a = ap.parse_args()
    print("bench/attention: 12 heads of 64, batch 1, p50 latency in us; 'op by op' is the same "
          "block with its probabilities also an output (not fusable); arena = memory between "
          "steps")
    print(f"{'seq':>5} {'threads':>7} | {'fused':>9} {'op by op':>9} {'ort':>9} | "
          f"{'fused/ort':>9} {'op/ort':>7} | {'arena fused':>12} {'op by op':>12}")
    with tempfile.TemporaryDirectory() as d:
        for seq in (int(x) for x in a.seqs.split(",")):
            paths = {}
            for name, extra in (("fused", False), ("ops", True)):
                paths[name] = os.path.join(d, f"{name}{seq}.onnx")
                onnx.save(block(seq, extra), paths[name])
            for t in (int(x) for x in a.threads.split(",")):
                f = gs_bench(a.build, paths["fused"], 1, a.seconds, None, t)
                o = gs_bench(a.build, paths["ops"], 1, a.seconds, None, t)
                r = ort_bench(paths["fused"], 1, a.seconds, t)
                print(f"{seq:>5} {t:>7} | {f['p50_us']:>9.1f} {o['p50_us']:>9.1f} "
                      f"{r['p50_us']:>9.1f} | {f['p50_us'] / r['p50_us']:>9.2f} "
                      f"{o['p50_us'] / r['p50_us']:>7.2f} | {f['arena_bytes'] / 1024:>9.0f} KiB "
                      f"{o['arena_bytes'] / 1024:>8.0f} KiB", flush=True)


if __name__ == "__main__":
    main()
