"""bench/images.py BUILD [--images N] [--threads T ...] [--torch-python PY]: images/s
of decode + resize + centre crop + normalise on the CPU, for a folder of
JPEG photos (500x375, quality 90, ImageNet's typical size), with
torchvision's ImageNet recipe (resize 256 bilinear antialiased, crop 224,
mean and std per channel, float32 CHW). In the same run, each held to the
same T cores (taskset, sched_setaffinity):

- gpusrv: `gpusrv batch` of a model that only takes each image's corner
  pixel (its compute is negligible), --workers T: the whole run, files read
  to outputs written; and its preprocess stage's own rate (busy time).
- PIL + numpy: Image.open, convert, resize, crop, then numpy, in T
  processes.
- torchvision: read_file + decode_jpeg and the v2 transforms on uint8
  tensors, in T processes of one torch thread each. torch does not fit the
  test venv; it runs under --torch-python (default .venv-zoo/bin/python
  where present), else it is left out and said so.

Each peer's processes are started and warmed on a few images before the
clock starts.

Where --device (opencl0) is there, a second table shows what moves off
the CPU when a device finishes the recipe (finish=device): the preprocess stage's
images/s (the CPU's own work: decoding only, the resize stage's kernels
resizing and cropping) against the whole recipe on the CPU, and the bytes
that cross per image."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
RECIPE = "resize=256,center_crop=224,scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225"


def make_photos(folder, n):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:375, 0:500]
    for i in range(n):
        phase = rng.uniform(0, 6.28, 3)
        base = np.stack([127 + 100 * np.sin(x / (20 + 7 * k) + y / (31 + 5 * k) + phase[k])
                         for k in range(3)], -1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"{i:05d}.jpg"), quality=90)


def corner_model(path):
    """Each image's top-left pixel: a model whose compute and output cost
    next to nothing, so that the run measures the images' way in."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 224, 224])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 1, 1])
    consts = [helper.make_tensor(n, TensorProto.INT64, [2], v)
              for n, v in (("starts", [0, 0]), ("ends", [1, 1]), ("axes", [2, 3]))]
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])
    graph = helper.make_graph([node], "corner", [x], [y], initializer=consts)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def gpusrv_batch(build, folder, model, out, threads, extra=(), recipe=RECIPE):
    p = subprocess.run(["taskset", "-c", f"0-{threads - 1}", os.path.join(build, "gpusrv"),
                        "batch", model, "--input", folder,
                        "--output", out, "--preprocess", recipe, "--workers", str(threads),
                        "--batch", "16", "--json", *extra], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench/images: gpusrv batch: {p.stderr.strip()}")
    return json.loads(p.stdout)


def gpusrv(build, folder, model, out, threads):
    r = gpusrv_batch(build, folder, model, out, threads)
    stage = next(s for s in r["stages"] if s["stage"] == "preprocess")
    return r["rows_per_s"], stage["batches_per_s_alone"] * 16  # all its threads


def cpu_share(build, folder, model, out, threads, device):
    """Where a device finishes the recipe: the preprocess stage's images/s
    (the CPU's work) and the bytes crossing per image, with the CPU doing
    the whole recipe (finish=cpu) and with the device resizing, cropping
    and normalising (finish=device); and the whole run's images/s. The
    stage's figure comes from a run of one slot, where no other stage runs
    beside it: PoCL's kernels would otherwise take its cores."""
    print(f"\nthe CPU's share where {device} finishes the recipe ({threads} threads"
          + ("; PoCL runs its kernels on these same cores, so its whole run says nothing of a "
             "GPU's)" if device.startswith("opencl") else ")"))
    print(f"{'CPU does':>24} {'stage img/s':>12} {'KiB/image h2d':>14} {'resized there':>14} "
          f"{'whole run img/s':>16}")
    rows = {}
    for label, finish in (("decode+resize+crop+norm", "cpu"), ("decode only", "device")):
        r = gpusrv_batch(build, folder, model, out, threads, ("--device", device),
                         f"{RECIPE},finish={finish}")
        alone = gpusrv_batch(build, folder, model, out, threads,
                             ("--device", device, "--slots", "1"), f"{RECIPE},finish={finish}")
        stage = next(s for s in alone["stages"] if s["stage"] == "preprocess")
        rows[finish] = stage["batches_per_s_alone"] * 16
        there = r["resized_on_device"]
        print(f"{label:>24} {rows[finish]:>12.0f} {r['h2d_bytes'] / 1024 / r['rows']:>14.0f} "
              f"{'-' if there is None else there:>14} {r['rows_per_s']:>16.0f}")
    print(f"the CPU's preprocess stage: {rows['device'] / rows['cpu']:.2f}x the images/s when "
          "the device resizes")


# ---- the peers, each run in worker processes -----------------------------------------------

def pil_one(path):
    import numpy as np
    from PIL import Image
    im = Image.open(path).convert("RGB")
    w, h = im.size
    size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    im = im.resize(size, Image.BILINEAR)
    left, top = int(round((size[0] - 224) / 2.0)), int(round((size[1] - 224) / 2.0))
    a = np.asarray(im.crop((left, top, left + 224, top + 224)), np.float32) / 255
    a = (a - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    return float(a.transpose(2, 0, 1).mean())


_tv = None


def torchvision_one(path):
    global _tv
    import torch
    from torchvision.io import decode_jpeg, read_file
    if _tv is None:
        from torchvision.transforms import v2
        torch.set_num_threads(1)
        _tv = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224),
                          v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])
    return float(_tv(decode_jpeg(read_file(path))).mean())


def peer(kind, files, threads):
    """Images/s of `kind` over `files` in `threads` processes."""
    import multiprocessing
    os.sched_setaffinity(0, range(threads))  # the cores gpusrv gets
    one = pil_one if kind == "pil" else torchvision_one
    with multiprocessing.get_context("fork").Pool(threads) as pool:
        pool.map(one, files[:2 * threads], chunksize=1)  # imports and set-up
        start = time.perf_counter()
        pool.map(one, files, chunksize=8)
        return len(files) / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?")
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--torch-python", default=os.path.join(ROOT, ".venv-zoo", "bin", "python"))
    ap.add_argument("--device", default="opencl0",
                    help="the device of the second table (cuda0 on a GPU)")
    ap.add_argument("--peer", help=argparse.SUPPRESS)  # torchvision, run under --torch-python
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        files = sorted(os.path.join(args.folder, f) for f in os.listdir(args.folder))
        print(json.dumps(peer(args.peer, files, args.threads[0])))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "photos")
        os.mkdir(folder)
        make_photos(folder, args.images)
        files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
        model = os.path.join(tmp, "corner.onnx")
        corner_model(model)
        has_torch = os.access(args.torch_python, os.X_OK) and subprocess.run(
            [args.torch_python, "-c", "import torchvision"], capture_output=True).returncode == 0
        print(f"{args.images} JPEGs of 500x375; images/s, decode + resize 256 + crop 224 + "
              f"normalise, float32 CHW")
        print(f"{'threads':>7} {'gpusrv batch':>13} {'its stage':>10} {'whole/stage':>11} "
              f"{'PIL+numpy':>10} {'torchvision':>12} {'vs PIL':>7} {'vs tv':>7}")
        for t in args.threads:
            whole, stage = gpusrv(args.build, folder, model, os.path.join(tmp, "out"), t)
            pil = peer("pil", files, t)
            tv = None
            if has_torch:
                p = subprocess.run([args.torch_python, __file__, "--peer", "torchvision",
                                    "--folder", folder, "--threads", str(t)],
                                   capture_output=True, text=True)
                tv = json.loads(p.stdout) if p.returncode == 0 else None
                if tv is None:
                    print(f"torchvision failed: {p.stderr.strip()[-300:]}", file=sys.stderr)
            print(f"{t:>7} {whole:>13.0f} {stage:>10.0f} {whole / stage:>10.0%} {pil:>10.0f} "
                  f"{tv if tv is None else round(tv):>12} {whole / pil:>6.2f}x "
                  f"{'-' if tv is None else f'{whole / tv:.2f}x':>7}")
        smi = subprocess.run([os.path.join(args.build, "gpusrv"), "smi", "--json"],
                             capture_output=True, text=True).stdout
        if f'"{args.device}"' in smi:
            cpu_share(args.build, folder, model, os.path.join(tmp, "out"), args.threads[-1],
                      args.device)
        if not has_torch:
            print(f"torchvision: not measured ({args.torch_python} cannot import it)")
        print("goals: gpusrv batch >= 1.5x torchvision's images/s on the same cores; the whole "
              "run within 10% of its slowest stage (preprocess)")


if __name__ == "__main__":
    main()
