#!/usr/bin/env python3
"""The digits models of benchmarks/training/digits_models.h in TensorFlow 1 (tf.compat.v1, graph mode).

Used two ways:
  tf_digits.py fidelity --dir DIR --steps N --batch B --learning-rate LR
      trains the MLP from DIR/init.f32 (w1, b1, w2, b2, w3, b3 as raw float32) on the batches of
      DIR/x.f32 and DIR/y.i32 (N batches of B rows, in order) and writes DIR/losses.txt: the
      TensorFlow version, then the loss of each step. Exit status 77 when TensorFlow cannot be
      imported. benchmarks/training/digits_fidelity runs it and compares with tessera's losses.
  import tf_digits (tf_bench.py's training group): load_digits, mlp_step, cnn_step.
"""
import argparse
import gzip
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

PIXELS = 64
CLASSES = 10
MLP_SIZES = [PIXELS, 128, 64, CLASSES]


def load_digits(path):
    """(x [n, 64] float32 in [0, 1], y [n] int32) in file order."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return rows[:, :PIXELS] / 16.0, rows[:, PIXELS].astype(np.int32)


def _placeholders(tf1):
    return (tf1.placeholder(tf1.float32, [None, PIXELS], name="x"), tf1.placeholder(tf1.int32, [None], name="y"))


def _weight(tf1, shape, fan_in):
    return tf1.Variable(tf1.truncated_normal(shape, stddev=np.sqrt(2.0 / fan_in)))


def _bias(tf1, n):
    return tf1.Variable(tf1.zeros([n]))


def _loss_and_train(tf1, y, logits, learning_rate):
    loss = tf1.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return loss, tf1.train.AdamOptimizer(learning_rate).minimize(loss)


def mlp_step(tf1, learning_rate, init=None):
    """(x, y, loss, train) of the MLP 64-128-64-10 (ReLU) in the default graph; init: the six
    initial values (w1, b1, w2, b2, w3, b3) as numpy arrays, or None for random ones."""
    x, y, loss = mlp_loss(tf1, init)
    return x, y, loss, tf1.train.AdamOptimizer(learning_rate).minimize(loss)


def mlp_loss(tf1, init=None):
    """(x, y, loss) of mlp_step, without the optimizer (the cluster workloads choose theirs)."""
    x, y = _placeholders(tf1)
    h = x
    for layer in range(3):
        fan_in, fan_out = MLP_SIZES[layer], MLP_SIZES[layer + 1]
        if init is None:
            w, b = _weight(tf1, [fan_in, fan_out], fan_in), _bias(tf1, fan_out)
        else:
            w, b = tf1.Variable(init[2 * layer]), tf1.Variable(init[2 * layer + 1])
        h = tf1.nn.bias_add(tf1.matmul(h, w), b)
        if layer < 2:
            h = tf1.nn.relu(h)
    return x, y, tf1.reduce_mean(tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))


def cnn_step(tf1, learning_rate):
    """(x, y, loss, train) of the CNN: two 3x3 SAME convs (32, 64 channels) + ReLU + 2x2 max pools,
    dense 256 -> 128 (ReLU) -> 10."""
    x, y = _placeholders(tf1)
    h = tf1.reshape(x, [-1, 8, 8, 1])
    for channels_in, channels_out in ((1, 32), (32, 64)):
        w, b = _weight(tf1, [3, 3, channels_in, channels_out], 9 * channels_in), _bias(tf1, channels_out)
        h = tf1.nn.relu(tf1.nn.bias_add(tf1.nn.conv2d(h, w, [1, 1, 1, 1], "SAME"), b))
        h = tf1.nn.max_pool2d(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    h = tf1.reshape(h, [-1, 256])
    h = tf1.nn.relu(tf1.nn.bias_add(tf1.matmul(h, _weight(tf1, [256, 128], 256)), _bias(tf1, 128)))
    logits = tf1.nn.bias_add(tf1.matmul(h, _weight(tf1, [128, CLASSES], 128)), _bias(tf1, CLASSES))
    return (x, y) + _loss_and_train(tf1, y, logits, learning_rate)


def fidelity(args):
    try:
        import tensorflow as tf
    except ImportError as e:
        print(f"tf_digits.py: cannot import tensorflow: {e}", file=sys.stderr)
        return 77
    tf1 = tf.compat.v1
    flat = np.fromfile(os.path.join(args.dir, "init.f32"), dtype=np.float32)
    init, at = [], 0
    for layer in range(3):
        for shape in ([MLP_SIZES[layer], MLP_SIZES[layer + 1]], [MLP_SIZES[layer + 1]]):
            n = int(np.prod(shape))
            init.append(flat[at:at + n].reshape(shape))
            at += n
    xs = np.fromfile(os.path.join(args.dir, "x.f32"), dtype=np.float32).reshape(args.steps, args.batch, PIXELS)
    ys = np.fromfile(os.path.join(args.dir, "y.i32"), dtype=np.int32).reshape(args.steps, args.batch)
    g = tf.Graph()
    with g.as_default():
        x, y, loss, train = mlp_step(tf1, args.learning_rate, init)
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            losses = [sess.run([loss, train], {x: xs[i], y: ys[i]})[0] for i in range(args.steps)]
    with open(os.path.join(args.dir, "losses.txt"), "w") as f:
        f.write(tf.__version__ + "\n" + "".join(f"{float(v)!r}\n" for v in losses))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    fp = sub.add_parser("fidelity")
    fp.add_argument("--dir", required=True)
    fp.add_argument("--steps", type=int, required=True)
    fp.add_argument("--batch", type=int, required=True)
    fp.add_argument("--learning-rate", type=float, required=True)
    args = ap.parse_args()
    return fidelity(args)


if __name__ == "__main__":
    sys.exit(main())
