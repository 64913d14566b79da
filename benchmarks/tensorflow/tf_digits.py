#!/usr/bin/env python3
"""The digits models of benchmarks/training/digits_models.h in TensorFlow 1 (tf.compat.v1, graph mode).

Used two ways:
  tf_digits.py fidelity --dir DIR --steps N --batch B --learning-rate LR [--model mlp|layers]
      trains the MLP from DIR/init.f32 (w1, b1, w2, b2, w3, b3 as raw float32) on the batches of
      DIR/x.f32 and DIR/y.i32 (N batches of B rows, in order) and writes DIR/losses.txt: the
      TensorFlow version, then the loss of each step. Exit status 77 when TensorFlow cannot be
      imported. benchmarks/training/digits_fidelity runs it and compares with tessera's losses.
      --model layers: the MLP of tf.compat.v1.layers and tf.compat.v1.losses (layers_step), which
      also writes DIR/moving.f32 (the batch normalization's moving mean, then moving variance);
      it needs tf_keras (TF_USE_LEGACY_KERAS: Keras 3 has no tf.compat.v1.layers), else exit 77.
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


# The penalty on the last layer's kernel in layers_step: L2 * l2_loss(w), tf.contrib.layers'
# l2_regularizer (digits_models.h's kLayersL2).
LAYERS_L2 = 1e-2


def layers_step(tf1, learning_rate, init):
    """(x, y, loss, train, (moving_mean, moving_variance)) of the MLP written with tf.layers: dense
    128 (no bias) -> batch normalization (training, non-fused) -> ReLU -> dense 64 (ReLU) -> dense 10
    with an L2 penalty; tf.losses' sparse cross entropy plus the penalty (get_total_loss); Adam
    after the UPDATE_OPS. init: the MLP's six initial values (b1 unused)."""
    x, y = _placeholders(tf1)
    const = tf1.constant_initializer
    h = tf1.layers.dense(x, 128, use_bias=False, kernel_initializer=const(init[0]))
    h = tf1.nn.relu(tf1.layers.batch_normalization(h, training=True, fused=False))
    h = tf1.layers.dense(h, 64, activation=tf1.nn.relu, kernel_initializer=const(init[2]),
                         bias_initializer=const(init[3]))
    logits = tf1.layers.dense(h, CLASSES, kernel_initializer=const(init[4]), bias_initializer=const(init[5]),
                              kernel_regularizer=lambda w: LAYERS_L2 * tf1.nn.l2_loss(w))
    tf1.losses.sparse_softmax_cross_entropy(y, logits)
    loss = tf1.losses.get_total_loss()
    with tf1.control_dependencies(tf1.get_collection(tf1.GraphKeys.UPDATE_OPS)):
        train = tf1.train.AdamOptimizer(learning_rate).minimize(loss)
    moving = {v.name: v for v in tf1.global_variables()}
    return x, y, loss, train, (moving["batch_normalization/moving_mean:0"],
                               moving["batch_normalization/moving_variance:0"])


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
    if args.model == "layers":
        # tf.compat.v1.layers needs Keras 2 (the tf_keras package), chosen before TensorFlow loads.
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
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
        moving = None
        if args.model == "layers":
            try:
                x, y, loss, train, moving = layers_step(tf1, args.learning_rate, init)
            except AttributeError as e:  # Keras 3: tf.compat.v1.layers is not available
                print(f"tf_digits.py: no tf.compat.v1.layers (install tf_keras): {e}", file=sys.stderr)
                return 77
        else:
            x, y, loss, train = mlp_step(tf1, args.learning_rate, init)
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            losses = [sess.run([loss, train], {x: xs[i], y: ys[i]})[0] for i in range(args.steps)]
            if moving is not None:
                np.concatenate(sess.run(list(moving))).astype(np.float32).tofile(
                    os.path.join(args.dir, "moving.f32"))
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
    fp.add_argument("--model", choices=["mlp", "layers"], default="mlp")
    args = ap.parse_args()
    return fidelity(args)


if __name__ == "__main__":
    sys.exit(main())
