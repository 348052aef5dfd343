"""Trains the digits demo model and exports it to ONNX.

An MLP (64 -> 64 -> 10) on scikit-learn's handwritten-digits data set
(load_digits: 8x8 images with pixel values 0..16, bundled with scikit-learn,
nothing downloaded), trained on 75% of it; the other 25% (train_test_split
with random_state=0) is the held-out split the tests score. The ONNX graph
takes raw pixels, scales them by 1/16 itself, and returns class
probabilities:

    pixels [batch, 64] -> Mul(1/16) -> Gemm -> Relu -> Gemm -> Softmax -> probs [batch, 10]

Run: .venv/bin/python models/digits/train.py  (writes models/digits/1/model.onnx)
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

HERE = os.path.dirname(os.path.abspath(__file__))


def held_out_split():
    """The split the model is trained and tested on; tests call this too."""
    digits = load_digits()
    x = digits.data.astype(np.float32)
    return train_test_split(x, digits.target, test_size=0.25, random_state=0)


def export(clf, path):
    (w1, w2), (b1, b2) = clf.coefs_, clf.intercepts_
    inits = [
        numpy_helper.from_array(np.array(1.0 / 16.0, np.float32), "scale"),
        numpy_helper.from_array(w1.astype(np.float32), "fc1.weight"),
        numpy_helper.from_array(b1.astype(np.float32), "fc1.bias"),
        numpy_helper.from_array(w2.astype(np.float32), "fc2.weight"),
        numpy_helper.from_array(b2.astype(np.float32), "fc2.bias"),
    ]
    nodes = [
        helper.make_node("Mul", ["pixels", "scale"], ["scaled"], name="scale"),
        helper.make_node("Gemm", ["scaled", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu1"),
        helper.make_node("Gemm", ["h_relu", "fc2.weight", "fc2.bias"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "digits",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="gpusrv models/digits/train.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    x_train, x_test, y_train, y_test = held_out_split()
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=600, random_state=0)
    clf.fit(x_train / 16.0, y_train)
    acc = clf.score(x_test / 16.0, y_test)
    path = os.path.join(HERE, "1", "model.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    export(clf, path)
    print(f"held-out accuracy (scikit-learn): {acc:.4f}; wrote {path}")


if __name__ == "__main__":
    main()
