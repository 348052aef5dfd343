"""`gpusrv batch` on images (issue 24): JPEG and PNG files made by Pillow,
decoded and preprocessed by a declared recipe, give the bytes that
torchvision's Resize, CenterCrop, ToTensor and Normalize give on the same
PIL image; images that cannot be read become zero rows named in failed.txt
while the rest go on; lists of paths; recipes refused saying why.

The model is Identity, so that its output is the preprocessed input. The
tolerance is float32 rounding of the normalisation (gpusrv computes
v * (scale/std) - mean/std, torch (v/255 - mean)/std, each step rounded):
2e-6, far below one 8-bit level (0.017 after std 0.229). Resizing itself must
give Pillow's bytes exactly, for every filter."""
import json
import os
import struct
import subprocess
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
IMAGENET = "scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225"
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}


def run(*args, check=True):
    p = subprocess.run([GPUSRV, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def identity_model(path, shape, dtype=TensorProto.FLOAT):
    x = helper.make_tensor_value_info("x", dtype, shape)
    y = helper.make_tensor_value_info("y", dtype, shape)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def photo(w, h, seed):
    """Smooth gradients and noise: JPEG compresses it as it does a photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 128 / (w + h)], -1)
    return np.clip(base + rng.normal(0, 24, (h, w, 3)), 0, 255).astype(np.uint8)


def png_bytes(pixels, depth, color_type, width=None, height=None):
    """A PNG written by hand, for what Pillow does not write (16-bit RGB) or
    a header that lies about the size."""
    h, w = pixels.shape[:2]
    kind = ">u2" if depth == 16 else "u1"
    raw = b"".join(b"\0" + pixels[y].astype(kind).tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    header = struct.pack(">IIBBBBB", width or w, height or h, depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def reference(path, resize=None, crop=None, filt="bilinear", normalise=True):
    """torchvision's transforms on a PIL image, their arithmetic written out:
    Resize(int) makes the shorter edge `resize` and the longer
    int(resize * long / short); CenterCrop starts at round((size - crop) / 2)
    and pads with zeros (the smaller half first) where the crop is larger."""
    im = Image.open(path).convert("RGB")
    if resize:
        w, h = im.size
        size = (resize, int(resize * h / w)) if w <= h else (int(resize * w / h), resize)
        im = im.resize(size, FILTERS[filt])
    a = np.asarray(im)
    if crop:
        h, w = a.shape[:2]
        pad = [((crop - h) // 2, (crop - h + 1) // 2) if crop > h else (0, 0),
               ((crop - w) // 2, (crop - w + 1) // 2) if crop > w else (0, 0), (0, 0)]
        a = np.pad(a, pad)
        h, w = a.shape[:2]
        top, left = int(round((h - crop) / 2.0)), int(round((w - crop) / 2.0))
        a = a[top:top + crop, left:left + crop]
    if not normalise:
        return a
    return ((a.astype(np.float32) / 255 - MEAN) / STD).transpose(2, 0, 1)


GOOD = {
    "a_landscape.jpg": lambda p: Image.fromarray(photo(500, 375, 1)).save(p, quality=90),
    "b_portrait.jpg": lambda p: Image.fromarray(photo(375, 500, 2)).save(p, quality=85),
    "c_odd.jpg": lambda p: Image.fromarray(photo(301, 299, 3)).save(p, subsampling=0),
    "d_progressive.jpg": lambda p: Image.fromarray(photo(640, 480, 4)).save(p, progressive=True),
    "e_grey.jpg": lambda p: Image.fromarray(photo(260, 300, 5)[..., 0]).save(p),
    "f_exact.png": lambda p: Image.fromarray(photo(224, 224, 6)).save(p),
    "g_grey.png": lambda p: Image.fromarray(photo(257, 199, 7)[..., 1]).save(p),
    "h_palette.png": lambda p: Image.fromarray(photo(300, 260, 8)).quantize(64).save(p),
    "i_alpha.png": lambda p: Image.fromarray(
        np.dstack([photo(280, 240, 9), photo(280, 240, 10)[..., :1]])).save(p),
    "j_bits.png": lambda p: Image.fromarray(photo(240, 300, 11)[..., 2] > 128).save(p),
    "k_rgb16.png": lambda p: open(p, "wb").write(png_bytes(
        np.random.default_rng(12).integers(0, 65536, (250, 230, 3)), 16, 2)),
    "l_clear.png": lambda p: Image.fromarray(photo(230, 250, 13)).quantize(32).save(
        p, transparency=0),  # a palette with a transparent entry (tRNS)
    "m_camera.jpg": lambda p: jpeg_with_stray_bytes(p),
}


def jpeg_with_stray_bytes(p):
    """Bytes between two markers, as some cameras write: libjpeg warns
    ("extraneous bytes before marker") and decodes, as Pillow does."""
    Image.fromarray(photo(300, 240, 14)).save(p)
    data = open(p, "rb").read()
    dqt = data.index(b"\xff\xdb")
    open(p, "wb").write(data[:dqt] + b"\x00\x17\x2a" + data[dqt:])


def jpeg_cut(p):
    Image.fromarray(photo(400, 300, 20)).save(p)
    data = open(p, "rb").read()
    open(p, "wb").write(data[:len(data) // 2])


def png_cut(p):
    Image.fromarray(photo(400, 300, 21)).save(p)
    data = open(p, "rb").read()
    open(p, "wb").write(data[:len(data) * 3 // 5])


def jpeg_bomb(p):
    """A real 8x8 JPEG whose frame header claims 60000 x 60000 pixels."""
    Image.fromarray(photo(8, 8, 22)).save(p)
    data = bytearray(open(p, "rb").read())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    open(p, "wb").write(bytes(data))


BAD = {
    "mm_corrupt.jpg": (lambda p: open(p, "wb").write(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8),
                      "not a readable JPEG"),
    "n_cut.jpg": (jpeg_cut, "not a readable JPEG"),
    "o_cut.png": (png_cut, "not a readable PNG"),
    "p_cmyk.jpg": (lambda p: Image.new("CMYK", (64, 64), (10, 20, 30, 40)).save(p),
                   "a CMYK JPEG: not supported"),
    "q_empty.png": (lambda p: open(p, "wb").close(), "an empty file"),
    "r_text.png": (lambda p: open(p, "w").write("not an image\n"), "neither a JPEG nor a PNG"),
    "s_bomb.png": (lambda p: open(p, "wb").write(png_bytes(
        np.zeros((1, 1, 3), np.uint8), 8, 2, width=100000, height=100000)),
                   "a PNG of 100000x100000 pixels, over the limit"),
    "t_bomb.jpg": (jpeg_bomb, "a JPEG of 60000x60000 pixels, over the limit"),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    (d / "photos").mkdir()
    for name, make in GOOD.items():
        make(str(d / "photos" / name))
    model = identity_model(d / "id.onnx", ["N", 3, 224, 224])
    return d, model


def rows_of(out):
    return np.load(out / "y.npy"), (out / "inputs.txt").read_text().split("\n")[:-1]


@pytest.mark.parametrize("filt", ["bilinear", "bicubic", "nearest"])
def test_recipe_gives_torchvision_s_values_for_every_filter(images, filt):
    d, model = images
    out = d / f"out-{filt}"
    p = run("batch", model, "--input", str(d / "photos"), "--output", str(out), "--batch", "4",
            "--preprocess", f"resize=256,center_crop=224,interpolation={filt},{IMAGENET}")
    got, paths = rows_of(out)
    assert [os.path.basename(q) for q in paths] == sorted(GOOD)  # name order
    assert got.shape == (len(GOOD), 3, 224, 224)
    for row, path in zip(got, paths):
        want = reference(path, 256, 224, filt)
        np.testing.assert_allclose(row, want, rtol=0, atol=2e-6, err_msg=path)
    assert not (out / "failed.txt").exists() and "could not be read" not in p.stderr
    assert "preprocess: on the CPU" in p.stdout


def test_16_bit_grey_keeps_the_high_byte(tmp_path):
    """Pillow makes a 16-bit grey PNG mode I;16, whose RGB conversion clips
    every value over 255 to white; gpusrv takes the high byte, as Pillow
    does for 16-bit RGB."""
    grey = np.random.default_rng(13).integers(0, 65536, (224, 224))
    (tmp_path / "g16.png").write_bytes(png_bytes(grey, 16, 0))
    model = identity_model(tmp_path / "u8.onnx", ["N", 224, 224, 3], TensorProto.UINT8)
    run("batch", model, "-i", str(tmp_path / "g16.png"), "-o", str(tmp_path / "out"))
    got = np.load(tmp_path / "out" / "y.npy")
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got[0], np.repeat((grey >> 8)[..., None], 3, -1))


def test_unreadable_images_are_zero_rows_named_in_failed_txt(images, tmp_path):
    d, model = images
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("a_landscape.jpg", "f_exact.png"):
        (mixed / name).write_bytes((d / "photos" / name).read_bytes())
    for name, (make, _) in BAD.items():
        make(str(mixed / name))
    out = tmp_path / "out"
    p = run("batch", model, "-i", str(mixed), "-o", str(out), "--batch", "3",
            "--preprocess", f"resize=256,center_crop=224,{IMAGENET}")
    assert f"{len(BAD)} images could not be read" in p.stderr
    got, paths = rows_of(out)
    failed = {}
    for line in (out / "failed.txt").read_text().splitlines():
        row, path, why = line.split("\t")
        assert paths[int(row)] == path
        failed[os.path.basename(path)] = why
    assert set(failed) == set(BAD)
    for name, (_, needle) in BAD.items():
        assert needle in failed[name], (name, failed[name])
    for row, path in zip(got, paths):
        if os.path.basename(path) in BAD:
            assert not row.any()
        else:
            np.testing.assert_allclose(row, reference(path, 256, 224), rtol=0, atol=2e-6)
    # A second run over good images only: the old failed.txt goes.
    run("batch", model, "-i", str(d / "photos" / "f_exact.png"), "-o", str(out))
    assert not (out / "failed.txt").exists()


def test_lists_of_paths_keep_their_order(images, tmp_path):
    d, model = images
    names = ["e_grey.jpg", "a_landscape.jpg", "k_rgb16.png"]
    (d / "list.txt").write_text("# three photos\n" + "\n".join(f"photos/{n}" for n in names) +
                                "\n\n" + str(d / "photos" / "missing.jpg") + "\n")
    (d / "list.csv").write_text("path,label\n" + "".join(f"photos/{n},{i}\n"
                                                         for i, n in enumerate(names)))
    for listing, rows in (("list.txt", 4), ("list.csv", 3)):
        out = tmp_path / listing
        p = run("batch", model, "-i", str(d / listing), "-o", str(out),
                "--preprocess", f"resize=256,center_crop=224,{IMAGENET}")
        got, paths = rows_of(out)
        assert len(got) == rows and [os.path.basename(q) for q in paths[:3]] == names
        for row, path in zip(got[:3], paths):
            np.testing.assert_allclose(row, reference(path, 256, 224), rtol=0, atol=2e-6)
        assert ("1 image could not be read" in p.stderr) == (rows == 4)
    # A link to the folder is the folder.
    (tmp_path / "linked").symlink_to(d / "photos")
    run("batch", model, "-i", str(tmp_path / "linked"), "-o", str(tmp_path / "via-link"),
        "--preprocess", f"resize=256,center_crop=224,{IMAGENET}")
    assert len(rows_of(tmp_path / "via-link")[1]) == len(GOOD)
    txt_failed = (tmp_path / "list.txt" / "failed.txt").read_text()
    assert "missing.jpg\tcannot open it: No such file or directory" in txt_failed


def test_crops_larger_than_the_image_pad_and_nhwc_bytes(images, tmp_path):
    """center_crop alone on images smaller than the crop pads them with
    zeros as torchvision does, and cuts larger ones; a uint8 NHWC model
    gets the bytes."""
    d, _ = images
    model = identity_model(tmp_path / "u8.onnx", ["N", 224, 224, 3], TensorProto.UINT8)
    small = tmp_path / "small"
    small.mkdir()
    Image.fromarray(photo(201, 150, 30)).save(small / "a.png")
    Image.fromarray(photo(300, 223, 31)).save(small / "b.png")
    Image.fromarray(photo(300, 260, 32)).save(small / "c.jpg")  # cropped only: part decoded
    run("batch", model, "-i", str(small), "-o", str(tmp_path / "out"),
        "--preprocess", "center_crop=224")
    got, paths = rows_of(tmp_path / "out")
    for row, path in zip(got, paths):
        np.testing.assert_array_equal(row, reference(path, crop=224, normalise=False))


def need_opencl(device="opencl0"):
    devices = [d["id"] for d in json.loads(run("smi", "--json").stdout)["devices"]]
    if device not in devices:
        why = f"no {device} on this machine (devices: {devices})"
        if os.environ.get("GSTEST_REQUIRE_DEVICE") == "1":
            pytest.fail(why)
        pytest.skip(why)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_on_a_device_the_recipe_ends_there_with_the_cpu_s_bits(images, tmp_path, layout):
    """With finish=device on opencl0 the CPU decodes; uint8 crosses to the
    device, which resizes and crops (the next test) and whose own Cast,
    Transpose, Mul and Add kernels finish the recipe: the same values, bit
    for bit, as the CPU's whole recipe. Left to auto, PoCL (an OpenCL CPU
    device, on the same cores) leaves it all to the CPU."""
    need_opencl()
    d, _ = images
    shape = ["N", 3, 224, 224] if layout == "nchw" else ["N", 224, 224, 3]
    model = identity_model(tmp_path / f"{layout}.onnx", shape)
    outs = {}
    for device, finish in (("cpu0", "device"), ("opencl0", "device"), ("opencl0", "auto")):
        out = tmp_path / f"{layout}-{device}-{finish}"
        p = run("batch", model, "-i", str(d / "photos"), "-o", str(out), "--device", device,
                "--batch", "4", "--preprocess",
                f"resize=256,center_crop=224,{IMAGENET},finish={finish}")
        on_device = "type, layout and normalisation on the device" in p.stdout
        assert on_device == (device == "opencl0" and finish == "device"), p.stdout
        outs[device, finish] = np.load(out / "y.npy")
    np.testing.assert_array_equal(outs["opencl0", "device"], outs["cpu0", "device"])
    np.testing.assert_array_equal(outs["opencl0", "auto"], outs["cpu0", "device"])
    if layout == "nchw":
        path = rows_of(tmp_path / "nchw-cpu0-device")[1][0]
        np.testing.assert_allclose(outs["cpu0", "device"][0], reference(path, 256, 224), rtol=0,
                                   atol=2e-6)


@pytest.fixture(scope="module")
def assorted(tmp_path_factory):
    """Photos of many sizes for the device's resize: one too large for its
    staging at --batch 4 (4 MiB), one smaller than the crop, one smaller
    only in height, one cut short (alone in the last, short batch)."""
    d = tmp_path_factory.mktemp("assorted")
    for i, (w, h) in enumerate([(500, 375), (375, 500), (2000, 1500), (200, 150), (257, 256),
                                (224, 224), (640, 427), (300, 200)]):
        Image.fromarray(photo(w, h, 40 + i)).save(d / f"a{i}.{'png' if i % 2 else 'jpg'}")
    jpeg_cut(str(d / "b_cut.jpg"))
    return d


@pytest.mark.parametrize("filt", ["bilinear", "bicubic", "nearest"])
def test_the_device_resizes_and_crops_with_the_cpu_s_bytes(assorted, tmp_path, filt):
    """With finish=device on opencl0 the CPU only decodes: the resize stage's
    two kernel passes (Pillow's fixed-point taps) resize and crop on the
    device. Every row equals the CPU's recipe bit for bit. The images the
    device does not take are resized by the CPU, and the summary counts
    them: one too large for the staging, and, with a crop but no resize,
    one smaller than the crop (padded). A file cut short is named in
    failed.txt, as on the CPU, its row black pixels normalised.
    GSTEST_IMAGE_DEVICE names another device (bench/gpu-check.sh: cuda0)."""
    dev = os.environ.get("GSTEST_IMAGE_DEVICE", "opencl0")
    need_opencl(dev)
    model = identity_model(tmp_path / "id.onnx", ["N", 3, 224, 224])
    # of the 8 readable: all but the 2000x1500 (resize); all but the 200x150 and the
    # 300x200 (crop only: padded)
    for recipe, on_device in ((f"resize=256,center_crop=224,interpolation={filt}", 7),
                              (f"center_crop=224,interpolation={filt}", 6)):
        outs = {}
        for device in ("cpu0", dev):
            out = tmp_path / f"{device}-{len(outs)}-{recipe[:6]}"
            p = run("batch", model, "-i", str(assorted), "-o", str(out), "--device", device,
                    "--batch", "4", "--json", "--preprocess", f"{recipe},{IMAGENET},finish=device")
            summary = json.loads(p.stdout)
            outs[device] = np.load(out / "y.npy")
            failed = (out / "failed.txt").read_text()
            assert "b_cut.jpg" in failed and len(failed.splitlines()) == 1, failed
            if device == dev:
                assert "resize" in [s["stage"] for s in summary["stages"]], summary
                assert summary["resized_on_device"] == on_device, (recipe, summary)
            else:
                assert summary["resized_on_device"] is None and summary["preprocess_on"] == "cpu"
        np.testing.assert_array_equal(outs[dev][:8], outs["cpu0"][:8])
        assert outs["cpu0"][:8].std() > 0.1
        # b_cut sorts last: zeros on the CPU; black pixels normalised on the device
        assert not outs["cpu0"][8].any()
        np.testing.assert_allclose(outs[dev][8], np.broadcast_to(
            (-MEAN / STD)[:, None, None], (3, 224, 224)), rtol=1e-6)


def test_short_of_device_memory_the_cpu_resizes_instead(assorted, tmp_path):
    """Where the device cannot hold the packs (PoCL held to 1 GiB, a batch
    of 400 images asking 400 MiB of staging in one allocation), the CPU
    resizes: the log says so, the summary says no image was resized on the
    device, and the rows are the same bytes."""
    need_opencl()
    model = identity_model(tmp_path / "id.onnx", ["N", 3, 32, 32])
    recipe = f"resize=40,center_crop=32,{IMAGENET},finish=device"
    outs = {}
    for limit in (None, "1"):
        out = tmp_path / f"out-{limit}"
        env = {**os.environ, **({"POCL_MEMORY_LIMIT": limit} if limit else {})}
        p = subprocess.run([GPUSRV, "batch", model, "-i", str(assorted), "-o", str(out),
                            "--device", "opencl0", "--batch", "400", "--json", "--preprocess",
                            recipe], capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        summary = json.loads(p.stdout)
        short = "no memory for the device's resize" in p.stderr
        assert short == (limit is not None), p.stderr
        assert (summary["resized_on_device"] is None) == short, summary
        outs[limit] = np.load(out / "y.npy")
    np.testing.assert_array_equal(outs["1"], outs[None])


def test_recipes_and_models_refused_saying_why(images, tmp_path):
    d, model = images
    photos = str(d / "photos")
    for spec in ("resize=0", "resize=10y", "center_crop=axb", "mean=1:2", "std=1:0:1",
                 "interpolation=lanczos", "layout=chwn", "finish=gpu", "gamma=2"):
        p = run("batch", model, "-i", photos, "-o", str(tmp_path / "o"), "--preprocess", spec,
                check=False)
        assert p.returncode == 2 and "preprocess" in p.stderr, (spec, p.stderr)
    flat = identity_model(tmp_path / "flat.onnx", ["N", 64])
    p = run("batch", flat, "-i", photos, "-o", str(tmp_path / "o"), check=False)
    assert p.returncode == 1 and "is not [N, 3, H, W] or [N, H, W, 3]" in p.stderr
    p = run("batch", model, "-i", photos, "-o", str(tmp_path / "o"), "--preprocess",
            "layout=nhwc", check=False)
    assert p.returncode == 1 and "layout=nhwc: [N, H, W, 3]" in p.stderr
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float32))
    p = run("batch", flat, "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "o"),
            "--preprocess", "resize=256", check=False)
    assert p.returncode == 1 and "is not images (.jpg, .jpeg, .png" in p.stderr
    # A recipe whose size is not the model's: each image refused, saying both.
    p = run("batch", model, "-i", str(d / "photos" / "a_landscape.jpg"), "-o",
            str(tmp_path / "o"), "--preprocess", "resize=200")
    assert "1 image could not be read" in p.stderr
    assert ("a 500x375 image becomes 266x200 (width x height) through the preprocess recipe; "
            "the model takes 224x224") in (tmp_path / "o" / "failed.txt").read_text()
