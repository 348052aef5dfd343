"""Plans made in stages (src/engine/plan_stages.c): graphs where a node's
output size depends on values computed from the inputs (NonZero,
NonMaxSuppression), and If, whose branch the condition chooses while
running. Each against onnxruntime, on inputs that give outputs of several
sizes, including none."""
import os
import subprocess
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from gsonnx import check_model, make_model, refusal, run_gpusrv

rng = np.random.default_rng(7)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def scalar(v, dt=np.float32):
    return np.array(v, dtype=dt)


# ---- NonZero ----------------------------------------------------------------------


def positives_model():
    """The positive elements of relu(x) - 0.5, doubled, then how many of those
    exceed 1: two cuts, one after the other."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r0"]),
        helper.make_node("Sub", ["r0", "half"], ["r"]),
        helper.make_node("Greater", ["r", "zero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["r", "idx"], ["pos"]),
        helper.make_node("Mul", ["pos", "two"], ["y"]),
        helper.make_node("Greater", ["y", "one"], ["mask2"]),
        helper.make_node("NonZero", ["mask2"], ["nz2"]),
        helper.make_node("Shape", ["nz2"], ["count"]),
    ]
    consts = {"zero": scalar(0), "half": scalar(0.5), "two": scalar(2), "one": scalar(1)}
    return nodes, consts


@pytest.mark.parametrize("rows", [1, 4, 9])
def test_nonzero_cuts_twice(rows):
    nodes, consts = positives_model()
    x = f32(rows, 3)
    model = make_model(nodes, {"x": x}, consts, [("y", np.float32), ("count", np.int64),
                                                 ("nz", np.int64)])
    check_model(model, {"x": x})


def test_nonzero_none_selected():
    nodes, consts = positives_model()
    x = -np.ones((3, 3), np.float32)
    model = make_model(nodes, {"x": x}, consts, [("y", np.float32), ("count", np.int64)])
    got = check_model(model, {"x": x})
    assert got["y"].shape == (0,)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.float16])
def test_nonzero_of_computed_values(dtype):
    # NaN counts as non-zero; -0.0 does not.
    x = np.array([[0, 1, -0.0], [np.nan, 2, 0]], np.float32)
    if dtype != np.float32:
        x = np.nan_to_num(x).astype(dtype)
    nodes = [helper.make_node("Identity", ["x"], ["v"]), helper.make_node("NonZero", ["v"], ["y"])]
    check_model(make_model(nodes, {"x": x}, outputs=[("y", np.int64)]), {"x": x})


def test_nonzero_of_a_scalar():
    x = scalar(3)
    nodes = [helper.make_node("Neg", ["x"], ["v"]), helper.make_node("NonZero", ["v"], ["y"])]
    check_model(make_model(nodes, {"x": x}, outputs=[("y", np.int64)]), {"x": x})


# ---- NonMaxSuppression -----------------------------------------------------------------

# The boxes and scores of the ONNX project's own node tests (opset 11 there,
# which gpusrv does not load; the op has not changed since).
BOXES = np.array([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.1, 1.0, 1.1], [0.0, -0.1, 1.0, 0.9],
                   [0.0, 10.0, 1.0, 11.0], [0.0, 10.1, 1.0, 11.1], [0.0, 100.0, 1.0, 101.0]]],
                 np.float32)
SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)


def nms_case(boxes, scores, max_out=3, iou=0.5, score=None, computed=True, **attrs):
    feeds = {"boxes": boxes, "scores": scores}
    consts = {"max_out": np.array([max_out], np.int64), "iou": np.array([iou], np.float32)}
    names = ["b", "s", "max_out", "iou"] if computed else ["boxes", "scores", "max_out", "iou"]
    if score is not None:
        consts["score"] = np.array([score], np.float32)
        names.append("score")
    nodes = [helper.make_node("NonMaxSuppression", names, ["sel"], **attrs),
             helper.make_node("Shape", ["sel"], ["n"])]
    if computed:  # computed from the inputs: the plan cuts around the node
        nodes = [helper.make_node("Identity", ["boxes"], ["b"]),
                 helper.make_node("Identity", ["scores"], ["s"])] + nodes
    model = make_model(nodes, feeds, consts, [("sel", np.int64), ("n", np.int64)])
    return check_model(model, feeds)


@pytest.mark.parametrize("computed", [True, False])
def test_nms_suppress_by_iou(computed):
    got = nms_case(BOXES, SCORES, computed=computed)
    assert got["sel"].shape == (3, 3)


def test_nms_score_threshold_and_limits():
    nms_case(BOXES, SCORES, max_out=3, iou=0.5, score=0.4)
    nms_case(BOXES, SCORES, max_out=2, iou=0.5)
    nms_case(BOXES, SCORES, max_out=0, iou=0.5)  # none asked for
    nms_case(BOXES, SCORES, max_out=10, iou=0.0)
    nms_case(BOXES, SCORES, max_out=10, iou=1.0)
    nms_case(BOXES, SCORES, score=0.99)  # none pass


def test_nms_center_point_box_and_flipped_corners():
    centers = np.array([[[0.5, 0.5, 1.0, 1.0], [0.5, 0.6, 1.0, 1.0], [0.5, 0.4, 1.0, 1.0],
                         [0.5, 10.5, 1.0, 1.0], [0.5, 10.6, 1.0, 1.0], [0.5, 100.5, 1.0, 1.0]]],
                       np.float32)
    nms_case(centers, SCORES, center_point_box=1)
    flipped = BOXES[:, :, [2, 3, 0, 1]].copy()
    nms_case(flipped, SCORES)


def test_nms_batches_and_classes():
    boxes = np.concatenate([BOXES, BOXES[:, ::-1]], axis=0)
    scores = np.concatenate([SCORES, SCORES * 0.5], axis=1)
    scores = np.concatenate([scores, scores[:, :, ::-1]], axis=0)
    got = nms_case(boxes, scores, max_out=2)
    assert len(got["sel"]) == 8


def test_nms_identical_boxes_and_ties():
    boxes = np.tile(np.array([0.0, 0.0, 1.0, 1.0], np.float32), (1, 10, 1))
    nms_case(boxes, np.full((1, 1, 10), 0.9, np.float32))


def test_nms_random_boxes():
    lo = rng.uniform(0, 50, size=(2, 40, 2)).astype(np.float32)
    boxes = np.concatenate([lo, lo + rng.uniform(1, 20, size=(2, 40, 2)).astype(np.float32)], 2)
    nms_case(boxes, rng.uniform(0, 1, size=(2, 3, 40)).astype(np.float32), max_out=15, iou=0.3,
             score=0.2)


# ---- If ------------------------------------------------------------------------------


def if_model():
    """y = If(sum(x) > 0, then: 2 r, else: r's positive elements) + 1, with
    r = relu(x) - 0.5: the else branch cuts again (NonZero)."""
    then_g = helper.make_graph([helper.make_node("Mul", ["r", "two"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", T.FLOAT, None)])
    else_g = helper.make_graph([
        helper.make_node("Greater", ["r", "zero"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["r", "idx"], ["e_out"])], "else", [],
        [helper.make_tensor_value_info("e_out", T.FLOAT, None)])
    nodes = [
        helper.make_node("Relu", ["x"], ["r0"]),
        helper.make_node("Sub", ["r0", "half"], ["r"]),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["y", "one"], ["z"]),
    ]
    consts = {"zero": scalar(0), "half": scalar(0.5), "two": scalar(2), "one": scalar(1)}
    return nodes, consts


def test_if_takes_each_branch_in_turn():
    nodes, consts = if_model()
    # One gpusrv process per feed; the server test below runs both in one.
    for shift in (1.0, -1.0, 1.0, -1.0):
        x = f32(5, 3) + shift
        check_model(make_model(nodes, {"x": x}, consts, [("z", np.float32)]), {"x": x})


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition(cond):
    # As functions expand (AffineGrid's align_corners): the branch is chosen
    # once, from the nodes that make the condition.
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", T.FLOAT, None)])
    x = f32(2, 2)
    nodes = [helper.make_node("Not", ["c0"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = make_model(nodes, {"x": x}, {"c0": np.array(not cond)})
    check_model(model, {"x": x})


def test_if_whose_branches_disagree_with_the_node_is_refused_at_load():
    two = helper.make_graph([helper.make_node("Neg", ["x"], ["a"]),
                             helper.make_node("Abs", ["x"], ["b"])], "two", [],
                            [helper.make_tensor_value_info("a", T.FLOAT, None),
                             helper.make_tensor_value_info("b", T.FLOAT, None)])
    x = f32(2, 2)
    nodes = [helper.make_node("Greater", ["x", "x"], ["g"]),
             helper.make_node("ReduceMax", ["g"], ["c"], keepdims=0),
             helper.make_node("If", ["c"], ["y"], then_branch=two, else_branch=two)]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(make_model(nodes, {"x": x}), path)
        p = run_gpusrv(path, {"x": x}, d)
    assert p.returncode == 1 and "then_branch has 2 outputs; the node has 1" in p.stderr, p.stderr


def test_graphs_nested_too_deep_are_refused():
    x = f32(2)
    inner = helper.make_graph([helper.make_node("Neg", ["x"], ["o0"])], "g0", [],
                              [helper.make_tensor_value_info("o0", T.FLOAT, None)])
    leaf = inner
    for k in range(1, 20):  # nested through then_branch only: the file grows linearly
        inner = helper.make_graph(
            [helper.make_node("If", ["c"], [f"o{k}"], then_branch=inner, else_branch=leaf)],
            f"g{k}", [], [helper.make_tensor_value_info(f"o{k}", T.FLOAT, None)])
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "m"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=leaf)]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(make_model(nodes, {"x": x}), path)
        p = run_gpusrv(path, {"x": x}, d)
    assert p.returncode == 1 and "nest deeper than 16" in p.stderr, p.stderr


# ---- wide nodes -------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Concat", "Sum", "Max"])
def test_more_inputs_than_a_call_holds(op):
    x = f32(2, 3)
    consts = {f"c{i}": scalar(np.sin(i)) for i in range(150)}
    nodes = [helper.make_node("Add", ["x", f"c{i}"], [f"v{i}"]) for i in range(150)]
    attrs = {"axis": 1} if op == "Concat" else {}
    nodes.append(helper.make_node(op, [f"v{i}" for i in range(150)], ["y"], **attrs))
    check_model(make_model(nodes, {"x": x}, consts), {"x": x})


# ---- Loop ------------------------------------------------------------------------------


def loop_model(with_cond):
    """Carries s (running sum of x scaled by the iteration) and a growing
    list (Concat, as torch's list append exports), and scans s each time;
    with_cond stops once s passes a bound."""
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),
        helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
        helper.make_node("Unsqueeze", ["fi", "axes0"], ["fi1"]),
        helper.make_node("Concat", ["list_in", "fi1"], ["list_out"], axis=0),
        helper.make_node("ReduceSum", ["s_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "bound"], ["c_out"]) if with_cond
        else helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node("Identity", ["s_out"], ["scan"]),
    ]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", T.INT64, []),
         helper.make_tensor_value_info("c_in", T.BOOL, []),
         helper.make_tensor_value_info("s_in", T.FLOAT, None),
         helper.make_tensor_value_info("list_in", T.FLOAT, None)],
        [helper.make_tensor_value_info("c_out", T.BOOL, []),
         helper.make_tensor_value_info("s_out", T.FLOAT, None),
         helper.make_tensor_value_info("list_out", T.FLOAT, None),
         helper.make_tensor_value_info("scan", T.FLOAT, None)])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero_i"], ["m"]),  # M: the rows of x
        helper.make_node("Mul", ["x", "zero_f"], ["s0"]),
        helper.make_node("Loop", ["m", "true", "s0", "empty"], ["s", "list", "scans"],
                         body=body),
    ]
    consts = {"zero_i": np.array(0, np.int64), "zero_f": scalar(0), "true": np.array(True),
              "empty": np.zeros((0,), np.float32), "axes0": np.array([0], np.int64),
              "bound": scalar(3.0)}
    return nodes, consts


@pytest.mark.parametrize("with_cond", [False, True])
@pytest.mark.parametrize("rows", [0, 1, 5])
def test_loop_carries_grows_and_scans(with_cond, rows):
    nodes, consts = loop_model(with_cond)
    x = f32(rows, 2, lo=0.1, hi=1.0)
    outputs = [("s", np.float32), ("list", np.float32), ("scans", np.float32)]
    check_model(make_model(nodes, {"x": x}, consts, outputs), {"x": x})


def test_if_made_only_of_constants_feeds_the_graph():
    # Neither the condition nor the branches read an input: the If's value
    # is a constant of the graph (it once made each stage cut around a copy
    # of itself without end).
    then_g = helper.make_graph([helper.make_node("Neg", ["w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["w"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", T.FLOAT, None)])
    x = f32(2, 3)
    nodes = [helper.make_node("If", ["c"], ["k"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["x", "k"], ["y"])]
    model = make_model(nodes, {"x": x}, {"c": np.array(True), "w": f32(3)})
    check_model(model, {"x": x})


def test_loop_scan_output_that_changes_shape_is_refused():
    # Iteration i scans range(i): [] then [0]; ONNX wants one shape.
    body = helper.make_graph(
        [helper.make_node("Range", ["zero", "i", "one"], ["r"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", T.INT64, []),
         helper.make_tensor_value_info("c_in", T.BOOL, [])],
        [helper.make_tensor_value_info("c_out", T.BOOL, []),
         helper.make_tensor_value_info("r", T.INT64, None)])
    x = np.array([2], np.int64)
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Loop", ["m", ""], ["scans"], body=body)]
    model = make_model(nodes, {"x": x}, {"zero": np.array(0, np.int64),
                                         "one": np.array(1, np.int64)},
                       [("scans", np.int64)])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        p = run_gpusrv(path, {"x": x}, d)
    assert p.returncode == 1 and "changes shape between iterations" in p.stderr, p.stderr


# ---- Scan ------------------------------------------------------------------------------


def scan_model(in_axes, in_dirs, out_axes, out_dirs):
    """A running sum over the rows of a (state), and a second sequence b
    scaled by the sum: two sequences, one state, two scan outputs, and a
    weight w the body captures from the graph around it."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a_t"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "b_t"], ["prod"]),
         helper.make_node("Add", ["prod", "w"], ["scan_p"]),
         helper.make_node("Identity", ["s_out"], ["scan_s"])], "body",
        [helper.make_tensor_value_info("s_in", T.FLOAT, None),
         helper.make_tensor_value_info("a_t", T.FLOAT, None),
         helper.make_tensor_value_info("b_t", T.FLOAT, None)],
        [helper.make_tensor_value_info("s_out", T.FLOAT, None),
         helper.make_tensor_value_info("scan_s", T.FLOAT, None),
         helper.make_tensor_value_info("scan_p", T.FLOAT, None)])
    attrs = dict(num_scan_inputs=2, body=body)
    if in_axes is not None:
        attrs.update(scan_input_axes=in_axes, scan_output_axes=out_axes)
    if in_dirs is not None:
        attrs.update(scan_input_directions=in_dirs, scan_output_directions=out_dirs)
    nodes = [helper.make_node("Relu", ["s0x"], ["s0"]),
             helper.make_node("Scan", ["s0", "a", "b"], ["s", "ys", "ps"], **attrs)]
    return nodes


@pytest.mark.parametrize("axes,dirs", [
    (None, None),                      # defaults: axis 0, forward
    (([1, 0], [0, -1]), None),          # a scanned along its columns, ps stacked last
    (None, ([1, 0], [0, 1])),           # a read backwards, ps written backwards
    (([-1, 0], [1, 1]), ([0, 1], [1, 0])),
])
@pytest.mark.parametrize("steps", [1, 4])
def test_scan_sums_and_scans(axes, dirs, steps):
    in_axes, out_axes = axes if axes else (None, None)
    in_dirs, out_dirs = dirs if dirs else (None, None)
    a_axis = in_axes[0] if in_axes else 0
    a = f32(3, steps) if a_axis in (1, -1) else f32(steps, 3)
    b = f32(steps, 3)
    s0x = f32(3)
    nodes = scan_model(in_axes, in_dirs, out_axes, out_dirs)
    feeds = {"s0x": s0x, "a": a, "b": b}
    outputs = [("s", np.float32), ("ys", np.float32), ("ps", np.float32)]
    check_model(make_model(nodes, feeds, {"w": f32(3)}, outputs), feeds)


def test_scan_whose_sequences_differ_in_length_is_refused():
    nodes = scan_model(None, None, None, None)
    feeds = {"s0x": f32(3), "a": f32(4, 3), "b": f32(5, 3)}
    model = make_model(nodes, feeds, {"w": f32(3)}, [("s", np.float32)])
    assert "sequences of 4 and 5 positions" in refusal(model, feeds)


def test_scan_with_bad_attributes_is_refused_at_load():
    nodes = scan_model([0, 0], None, [0, 0], None)
    axes = next(a for a in nodes[1].attribute if a.name == "scan_input_axes")
    axes.ints.append(0)  # three entries for two sequences
    feeds = {"s0x": f32(3), "a": f32(4, 3), "b": f32(4, 3)}
    model = make_model(nodes, feeds, {"w": f32(3)}, [("s", np.float32)])
    assert "scan_input_axes must hold 2 ints" in refusal(model, feeds)


# ---- refusals on the paths of a run ----------------------------------------------------------




def test_nms_iou_threshold_out_of_range_is_refused():
    nodes = [helper.make_node("Identity", ["boxes"], ["b"]),
             helper.make_node("NonMaxSuppression", ["b", "scores", "max_out", "iou"], ["sel"])]
    feeds = {"boxes": BOXES, "scores": SCORES}
    consts = {"max_out": np.array([3], np.int64), "iou": np.array([1.5], np.float32)}
    err = refusal(make_model(nodes, feeds, consts, [("sel", np.int64)]), feeds)
    assert "iou_threshold 1.5 is not in [0, 1]" in err, err


def test_if_condition_of_several_values_is_refused():
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, None)])
    x = f32(2, 2)
    nodes = [helper.make_node("Greater", ["x", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=then_g)]
    err = refusal(make_model(nodes, {"x": x}, {"zero": scalar(0)}), {"x": x})
    assert "the condition must be one value" in err, err


def test_loop_trip_count_must_be_int64():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Identity", ["s_in"], ["s_out"])], "body",
        [helper.make_tensor_value_info("i", T.INT64, []),
         helper.make_tensor_value_info("c_in", T.BOOL, []),
         helper.make_tensor_value_info("s_in", T.FLOAT, None)],
        [helper.make_tensor_value_info("c_out", T.BOOL, []),
         helper.make_tensor_value_info("s_out", T.FLOAT, None)])
    x = f32(3)
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),  # float, not int64
             helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)]
    err = refusal(make_model(nodes, {"x": x}), {"x": x})
    assert "M must be an int64, not float32" in err, err
