"""Attention run as one step (src/engine/plan_attention.c, the CPU's kernel
in src/hal/cpu/ops/k_attention.c): MatMul(Q, Kᵀ), a scale, an additive
mask, Softmax over the keys and MatMul(P, V), in the forms torch.onnx and
Hugging Face exports write them, against onnxruntime. The report says how
many blocks became one kernel: one each on the CPU; none on devices without
the Attention kernel, where the steps stay on the device."""
import numpy as np
import pytest
from onnx import helper

from gsonnx import DEVICE, check_model, make_model

rng = np.random.default_rng(23)
FUSES = DEVICE in (None, "cpu0")  # testcpu0 and the kernel devices lack Attention
STEPS = ["MatMul", "Softmax", "Mul", "Div", "Add", "Transpose"]


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def key_padding(b, t, keep):
    """[b, 1, 1, t]: 0 for the first `keep` keys of each row, -1e9 after."""
    m = np.zeros((b, 1, 1, t), np.float32)
    m[..., keep:] = -1e9
    return m


def blocks(report):
    for line in report.splitlines():
        if "attention blocks" in line:
            return int(line.split()[1])
    return 0


def run(model, feeds, rtol=1e-4, atol=1e-5):
    _, report = check_model(model, feeds, rtol=rtol, atol=atol, on_device=STEPS,
                            with_report=True)
    return blocks(report)


def torch_sdpa(b, h, L, T, d, dv, mask):
    """torch.onnx's scaled_dot_product_attention: Q and Kᵀ each scaled by
    √(1/√d), Kᵀ by a Transpose, the mask added after the product."""
    s = np.array((1.0 / np.sqrt(d)) ** 0.5, np.float32)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["q", "s"], ["qs"]),
             helper.make_node("Mul", ["kt", "s"], ["kts"]),
             helper.make_node("MatMul", ["qs", "kts"], ["scores"])]
    feeds = {"q": f32(b, h, L, d), "k": f32(b, h, T, d), "v": f32(b, h, T, dv)}
    last = "scores"
    if mask is not None:
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"]))
        feeds["mask"] = mask
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    return make_model(nodes, feeds, {"s": s}), feeds


@pytest.mark.parametrize("b,h,L,T,d,dv,keep", [
    (2, 3, 45, 45, 16, 16, 40),   # self-attention, a block of 32 rows and one of 13
    (1, 2, 7, 70, 8, 24, 50),     # cross-attention: fewer queries than keys, dv != d
    (1, 1, 1, 33, 4, 4, None),    # one query (a decoder's step), no mask
])
def test_torch_scaled_dot_product_attention(b, h, L, T, d, dv, keep):
    mask = key_padding(b, T, keep) if keep is not None else None
    model, feeds = torch_sdpa(b, h, L, T, d, dv, mask)
    assert run(model, feeds) == (1 if FUSES else 0)


def test_bert_style_scores_divided_then_masked():
    # MatMul(Q, Kᵀ) with Kᵀ given, Div by √d, Add of a [b, 1, 1, T] mask.
    b, h, L, d = 2, 4, 20, 8
    feeds = {"q": f32(b, h, L, d), "kt": f32(b, h, d, L), "v": f32(b, h, L, d),
             "mask": key_padding(b, L, 15)}
    model = make_model([helper.make_node("MatMul", ["q", "kt"], ["s"]),
                        helper.make_node("Div", ["s", "root"], ["sd"]),
                        helper.make_node("Add", ["sd", "mask"], ["sm"]),
                        helper.make_node("Softmax", ["sm"], ["p"], axis=3),
                        helper.make_node("MatMul", ["p", "v"], ["y"])],
                       feeds, {"root": np.array(np.sqrt(d), np.float32)})
    assert run(model, feeds) == (1 if FUSES else 0)


def test_three_d_heads_folded_into_the_batch_with_a_causal_mask():
    # [batch x heads, L, d] as older exporters reshape them; a causal mask [L, L] added.
    n, L, d = 6, 37, 16
    causal = np.triu(np.full((L, L), -1e9, np.float32), 1)
    feeds = {"q": f32(n, L, d), "k": f32(n, L, d), "v": f32(n, L, d)}
    model = make_model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                        helper.make_node("MatMul", ["q", "kt"], ["s"]),
                        helper.make_node("Mul", ["s", "scale"], ["ss"]),
                        helper.make_node("Add", ["causal", "ss"], ["sm"]),
                        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
                        helper.make_node("MatMul", ["p", "v"], ["y"])],
                       feeds, {"scale": np.array(0.25, np.float32), "causal": causal})
    assert run(model, feeds) == (1 if FUSES else 0)


def test_scores_read_elsewhere_are_not_fused():
    # The probabilities are an output too: they must exist, so nothing is fused.
    model, feeds = torch_sdpa(1, 2, 9, 9, 8, 8, key_padding(1, 9, 6))
    model.graph.output.append(helper.make_tensor_value_info("p", 1, None))
    assert run(model, feeds) == 0


def test_a_mask_broadcast_over_the_keys_is_not_fused():
    # A [b, h, L, 1] mask adds one value to a whole row: Attention's mask
    # must cover the keys, so the steps stay as they are.
    b, h, L, d = 1, 2, 10, 8
    feeds = {"q": f32(b, h, L, d), "kt": f32(b, h, d, L), "v": f32(b, h, L, d),
             "mask": f32(b, h, L, 1)}
    model = make_model([helper.make_node("MatMul", ["q", "kt"], ["s"]),
                        helper.make_node("Add", ["s", "mask"], ["sm"]),
                        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
                        helper.make_node("MatMul", ["p", "v"], ["y"])], feeds)
    assert run(model, feeds) == 0


def test_a_softmax_over_another_axis_is_not_fused():
    b, h, L, d = 1, 2, 10, 8
    feeds = {"q": f32(b, h, L, d), "kt": f32(b, h, d, L), "v": f32(b, h, L, d)}
    model = make_model([helper.make_node("MatMul", ["q", "kt"], ["s"]),
                        helper.make_node("Softmax", ["s"], ["p"], axis=2),
                        helper.make_node("MatMul", ["p", "v"], ["y"])], feeds)
    assert run(model, feeds) == 0


def test_a_causal_mask_of_two_dims_on_four_dim_scores():
    b, h, L, d = 2, 3, 19, 8
    causal = np.triu(np.full((L, L), -np.inf, np.float32), 1)
    feeds = {"q": f32(b, h, L, d), "kt": f32(b, h, d, L), "v": f32(b, h, L, d)}
    model = make_model([helper.make_node("MatMul", ["q", "kt"], ["s"]),
                        helper.make_node("Add", ["s", "causal"], ["sm"]),
                        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
                        helper.make_node("MatMul", ["p", "v"], ["y"])], feeds, {"causal": causal})
    assert run(model, feeds) == (1 if FUSES else 0)


@pytest.mark.parametrize("form", ["transposed_twice", "scores_added_to_themselves"])
def test_a_value_in_two_roles_is_not_fused(form):
    # One value as both Q and Kᵀ (made by a Transpose the step would take),
    # or the scores as their own mask: the step would read what nothing makes.
    b, h, n = 1, 2, 8
    if form == "transposed_twice":
        feeds = {"x": f32(b, h, n, n), "v": f32(b, h, n, n)}
        nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
                 helper.make_node("MatMul", ["t", "t"], ["sm"])]
    else:
        feeds = {"q": f32(b, h, n, n), "kt": f32(b, h, n, n), "v": f32(b, h, n, n)}
        nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]),
                 helper.make_node("Add", ["s", "s"], ["sm"])]
    nodes += [helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    assert run(make_model(nodes, feeds), feeds) == 0
