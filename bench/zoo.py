"""bench/zoo: models as users export them. torchvision's classification,
segmentation and detection models and transformer encoders and decoders
built from torch.nn, exported by torch.onnx.export (opset 17, a dynamic
batch, random weights), each checked against onnxruntime (rtol 1e-3,
atol 1e-4, element by element; "close" when only a tolerance relative to
the output's largest value holds, with torch's own difference from
onnxruntime beside it) through `gpusrv model run`, and timed at batch 1
beside onnxruntime on one and on two threads (gs-bench-models).

Runs in its own venv with torch and torchvision (`make zoo` makes it).

Usage: .venv-zoo/bin/python bench/zoo.py BUILD_DIR [--only REGEX] [--family F,...]
           [--max-params M] [--seconds S] [--no-time] [--json FILE]"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch
import torchvision
from torch import nn

RTOL, ATOL = 1e-3, 1e-4


# ---- the models ---------------------------------------------------------------------------

class Tensor0(nn.Module):
    """Segmentation models return a dict: the 'out' map is the prediction."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


class Detector(nn.Module):
    """Detection models take a list of images and return a list of dicts."""
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        out = self.m([x[0]])[0]
        return out["boxes"], out["scores"], out["labels"]


class Encoder(nn.Module):
    """A transformer encoder with a padding mask, as a classifier uses it."""
    def __init__(self, d=64, heads=4, layers=2, vocab=100):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, tokens, pad):
        h = self.enc(self.emb(tokens), src_key_padding_mask=pad)
        return self.head(h.mean(dim=1))


class CausalLM(nn.Module):
    """A decoder-only language model: causal mask, positions from Range,
    the output projection tied to the embedding."""
    def __init__(self, d=64, heads=4, layers=2, vocab=100, max_len=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(d, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens):
        n = tokens.shape[1]
        pos = torch.arange(n, device=tokens.device)
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        h = self.body(self.emb(tokens) + self.pos(pos), mask=mask)
        return self.out(h)


class Seq2Seq(nn.Module):
    """nn.Transformer: encoder and decoder, causal mask on the target."""
    def __init__(self, d=64, heads=4, vocab=100):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.t = nn.Transformer(d, heads, 2, 2, 4 * d, dropout=0.0, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.out(self.t(self.emb(src), self.emb(tgt), tgt_mask=mask))


def image(size=224):
    return torch.rand(1, 3, size, size)


def detector(models, name):
    """With random weights no score passes the usual thresholds: with them at
    zero the outputs hold boxes, so that the check compares values."""
    for key in ("box_score_thresh", "score_thresh"):
        try:
            return models.get_model(name, weights=None, weights_backbone=None, **{key: 0.0})
        except TypeError:
            continue
    return models.get_model(name, weights=None, weights_backbone=None)


def zoo(families, max_params):
    """(family, name, build) where build() gives (module, inputs, input names, dynamic axes)."""
    from torchvision import models
    out = []
    if "classification" in families:
        for name in models.list_models(module=models):
            size = 299 if name == "inception_v3" else 224
            out.append(("classification", name,
                        lambda n=name, s=size: (models.get_model(n, weights=None), (image(s),),
                                                ["x"], {"x": {0: "batch"}})))
    if "segmentation" in families:
        for name in models.list_models(module=models.segmentation):
            out.append(("segmentation", name, lambda n=name: (
                Tensor0(models.get_model(n, weights=None, weights_backbone=None)), (image(),),
                ["x"], {"x": {0: "batch"}})))
    if "detection" in families:
        for name in models.list_models(module=models.detection):
            out.append(("detection", name, lambda n=name: (
                Detector(detector(models, n)), (image(320),), ["x"], {})))
    if "transformer" in families:
        tok = torch.randint(0, 100, (2, 12))
        pad = torch.zeros(2, 12, dtype=torch.bool)
        pad[1, 8:] = True
        tok128 = torch.randint(0, 1000, (1, 128))
        pad128 = torch.zeros(1, 128, dtype=torch.bool)
        pad128[0, 100:] = True
        out += [
            ("transformer", "encoder_padding_mask",
             lambda: (Encoder(), (tok, pad), ["tokens", "pad"], {"tokens": {0: "b"}, "pad": {0: "b"}})),
            ("transformer", "causal_lm_tied",
             lambda: (CausalLM(), (tok,), ["tokens"], {"tokens": {0: "b", 1: "n"}})),
            ("transformer", "seq2seq",
             lambda: (Seq2Seq(), (tok, tok[:, :7]), ["src", "tgt"],
                      {"src": {0: "b"}, "tgt": {0: "b"}})),
            # BERT-base's layer sizes (d 768, 12 heads, feed-forward 3072), two layers, 128
            # tokens: products of 128 rows against 0.6 to 2.4 M weights each.
            ("transformer", "encoder_bert_base_2layer",
             lambda: (Encoder(d=768, heads=12, layers=2, vocab=1000), (tok128, pad128),
                      ["tokens", "pad"], {"tokens": {0: "b"}, "pad": {0: "b"}})),
        ]
    return out


# ---- checking and timing ----------------------------------------------------------------------

def gpusrv_run(gpusrv, path, feeds, work):
    args = [gpusrv, "model", "run", path, "-o", os.path.join(work, "out"), "--device", "cpu0"]
    for k, (n, a) in enumerate(feeds.items()):
        p = os.path.join(work, f"in{k}.npy")
        np.save(p, a)
        args += ["-i", f"{n}={p}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=1800)


def check(gpusrv, path, feeds, work):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(None, feeds)
    p = gpusrv_run(gpusrv, path, feeds, work)
    if p.returncode == 1:
        return "refused", p.stderr.strip().splitlines()[-1][:300]
    if p.returncode != 0:
        return "crash", f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
    worst, status = 0.0, "pass"
    for n, w in zip(names, want):
        safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in n)
        g = np.load(os.path.join(work, "out", safe + ".npy"))
        if g.shape != w.shape:
            return "wrong", f"{n}: shape {g.shape}, onnxruntime {w.shape}"
        if w.dtype.kind == "f" and w.size:
            diff = np.abs(g.astype(np.float64) - w)
            worst = max(worst, float(diff.max()))
            if (diff > ATOL + RTOL * np.abs(w)).any():
                # Element by element it fails; measured against the output's
                # largest value it may still be float32 rounding (deep
                # random-weight nets reach 1e4 and more).
                if (diff > ATOL + RTOL * np.abs(w).max()).any():
                    return "wrong", f"{n}: max abs difference {worst:.3g}"
                status = "close"
                detail = (f"{n}: max abs difference {worst:.3g} where the output reaches "
                          f"{np.abs(w).max():.3g}")
        elif not np.array_equal(g, w):
            return "wrong", f"{n}: values differ"
    if status == "close":
        return status, detail
    return "pass", f"max abs difference {worst:.2g}"


def detector_instability(model, args, path, feeds):
    """Where torch's own outputs miss onnxruntime's beyond the tolerance, what
    the first such output's largest difference is; else None."""
    with torch.no_grad():
        ref = model(*args)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for t, w in zip(ref, sess.run(None, feeds)):
        t = t.numpy()
        if t.shape != w.shape:
            return f"shape {t.shape}, onnxruntime {w.shape}"
        if w.dtype.kind == "f" and w.size:
            diff = np.abs(t.astype(np.float64) - w)
            if (diff > ATOL + RTOL * np.abs(w)).any():
                return f"max abs difference {float(diff.max()):.3g}"
        elif not np.array_equal(t, w):
            return "values differ"
    return None


def ort_p50(path, feeds, threads, seconds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
    lat, start = [], time.perf_counter()
    while len(lat) < 5 or (time.perf_counter() - start < seconds and len(lat) < 10000):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return lat[len(lat) // 2] * 1e3


def gpusrv_p50(build, path, seconds):
    p = subprocess.run([os.path.join(build, "bench", "gs-bench-models"), path, "--batch", "1",
                        "--seconds", str(seconds), "--iters", "5", "--device", "cpu0"],
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])["p50_us"] / 1e3


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--only", default="")
    ap.add_argument("--family", default="classification,segmentation,detection,transformer")
    ap.add_argument("--max-params", type=float, default=150.0,
                    help="skip models with more parameters (millions)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    # The fused fast path of nn.TransformerEncoderLayer has no ONNX export.
    torch.backends.mha.set_fastpath_enabled(False)
    gpusrv = os.path.join(a.build, "gpusrv")
    rows = []
    for family, name, build in zoo(a.family.split(","), a.max_params):
        if a.only and not re.search(a.only, name):
            continue
        row = {"family": family, "model": name}
        t0 = time.time()
        with tempfile.TemporaryDirectory() as work:
            try:
                model, args, in_names, dyn = build()
                model.eval()
                params = sum(p.numel() for p in model.parameters()) / 1e6
                row["params_m"] = round(params, 1)
                if params > a.max_params:
                    row.update(status="skipped", detail=f"{params:.0f}M parameters "
                               f"(over --max-params {a.max_params:.0f})")
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    continue
                path = os.path.join(work, "model.onnx")
                with torch.no_grad():
                    torch.onnx.export(model, args, path, opset_version=17, input_names=in_names,
                                      dynamic_axes=dyn or None, dynamo=False)
                feeds = {n: t.numpy() for n, t in zip(in_names, args)}
            except Exception as e:  # noqa: BLE001 - the exporter's refusal is a result too
                row.update(status="export-failed", detail=str(e).splitlines()[0][:200])
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            row["status"], row["detail"] = check(gpusrv, path, feeds, work)
            if row["status"] == "wrong" and family == "detection":
                # Detectors with random weights give proposals whose scores are
                # equal to a few parts in a million; float rounding then orders
                # them differently. When torch itself differs from onnxruntime
                # beyond the tolerance too, the model is unstable, not wrong.
                torch_diff = detector_instability(model, args, path, feeds)
                if torch_diff:
                    row["status"] = "unstable"
                    row["detail"] += f"; torch itself differs from onnxruntime: {torch_diff}"
            if row["status"] == "close":  # the exporter's own difference, for scale
                with torch.no_grad():
                    ref = model(*args)
                ref = ref[0] if isinstance(ref, (tuple, list)) else ref
                sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                w = sess.run(None, feeds)[0]
                row["detail"] += (f"; torch itself differs from onnxruntime by "
                                  f"{float(np.abs(ref.numpy() - w).max()):.3g}")
            # gs-bench-models feeds random float32: the models that take images.
            timed = all(v.dtype == np.float32 for v in feeds.values())
            if row["status"] == "pass" and not a.no_time and timed:
                row["gpusrv_ms"] = gpusrv_p50(a.build, path, a.seconds)
                row["ort1_ms"] = ort_p50(path, feeds, 1, a.seconds)
                row["ort2_ms"] = ort_p50(path, feeds, 2, a.seconds)
        row["seconds"] = round(time.time() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    tried = [r for r in rows if r["status"] not in ("skipped", "export-failed")]
    passed = sum(r["status"] == "pass" for r in tried)
    close = sum(r["status"] == "close" for r in tried)
    print(f"zoo: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}; "
          f"{passed} of {len(tried)} exported models match onnxruntime element by element "
          f"(rtol {RTOL}, atol {ATOL}), {close} more within rtol of the output's largest value",
          flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
