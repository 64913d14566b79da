#!/usr/bin/env python3
"""tessera's event files read by TensorBoard's own EventAccumulator (issue 24).

    tensorboard_reader_test.py PYTHON FIXTURE TESSERA_CLI

PYTHON is the benchmarks' venv interpreter (benchmarks/.venv/bin/python, where
`pip install tensorboard` put TensorBoard); without it, or without TensorBoard in it, the test
exits 77 (ctest: skipped). FIXTURE is tests/tensorboard_fixture (known scalars, a histogram, a
graph); TESSERA_CLI trains the digits MLP with --logdir. This script re-runs itself under PYTHON.
"""
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77


def check_fixture(ea_module, logdir):
    ea = ea_module.EventAccumulator(logdir, size_guidance={
        ea_module.SCALARS: 0, ea_module.HISTOGRAMS: 0, ea_module.GRAPH: 1})
    ea.Reload()
    tags = ea.Tags()
    assert "wave/sine" in tags["scalars"], tags
    assert "weights/layer1" in tags["histograms"], tags
    assert tags["graph"], tags

    sine = ea.Scalars("wave/sine")
    assert [e.step for e in sine] == list(range(50)), [e.step for e in sine]
    for e in sine:
        want = struct.unpack("f", struct.pack("f", math.sin(0.1 * e.step)))[0]
        assert e.value == want, (e.step, e.value, want)

    hists = ea.Histograms("weights/layer1")
    assert [e.step for e in hists] == [0, 10, 20, 30, 40], [e.step for e in hists]
    for e in hists:
        h = e.histogram_value
        values = [-2.0, -1.0, 0.0, 0.0, 1.0, 2.5, float(e.step)]
        assert h.num == len(values), h
        assert h.min == min(values) and h.max == max(values), h
        assert math.isclose(h.sum, sum(values)) and math.isclose(h.sum_squares, sum(v * v for v in values)), h
        assert len(h.bucket_limit) == len(h.bucket) and sum(h.bucket) == len(values), h
        # Each bucket [previous limit, limit) holds exactly the values inside it.
        lo = -sys.float_info.max
        for limit, count in zip(h.bucket_limit, h.bucket):
            assert count == sum(1 for v in values if lo <= v < limit), (e.step, lo, limit, count)
            lo = limit

    graph = ea.Graph()
    nodes = {n.name: n for n in graph.node}
    for name, op in [("v", "Placeholder"), ("h", "Placeholder"), ("layer/w", "VariableV2"), ("layer/y", "MatMul"),
                     ("wave/sine", "ScalarSummary"), ("weights/layer1", "HistogramSummary")]:
        assert name in nodes, (name, sorted(nodes))
        assert nodes[name].op == op, (name, nodes[name].op)
    assert list(nodes["wave/sine"].input) == ["v"], nodes["wave/sine"].input
    assert nodes["layer/y"].attr["_output_shapes"].list.shape[0].dim[0].size == 2
    print("fixture: %d scalars, %d histograms, %d graph nodes read by EventAccumulator" %
          (len(sine), len(hists), len(nodes)))


def check_digits(ea_module, logdir):
    ea = ea_module.EventAccumulator(logdir, size_guidance={ea_module.SCALARS: 0, ea_module.HISTOGRAMS: 0})
    ea.Reload()
    tags = ea.Tags()
    for tag in ("train/loss", "test/accuracy"):
        assert tag in tags["scalars"], tags
    assert "weights/mlp/hidden1/w" in tags["histograms"], tags
    loss = ea.Scalars("train/loss")
    assert [e.step for e in loss] == [0, 50, 100, 150, 199], [e.step for e in loss]
    assert loss[-1].value < loss[0].value, [e.value for e in loss]
    accuracy = ea.Scalars("test/accuracy")
    assert 0.0 <= accuracy[-1].value <= 1.0 and accuracy[-1].value > accuracy[0].value, [e.value for e in accuracy]
    assert any(n.name == "mlp/hidden1/w" for n in ea.Graph().node)
    print("digits: loss %.3f -> %.3f, accuracy %.3f -> %.3f" %
          (loss[0].value, loss[-1].value, accuracy[0].value, accuracy[-1].value))


def main():
    python, fixture, cli = sys.argv[1:4]
    if os.environ.get("TESSERA_TB_CHILD") != "1":
        if not os.path.exists(python):
            print("skipped: no %s (python3 -m venv benchmarks/.venv && benchmarks/.venv/bin/pip install tensorboard)"
                  % python)
            return SKIP
        env = dict(os.environ, TESSERA_TB_CHILD="1")
        return subprocess.call([python, os.path.abspath(__file__)] + sys.argv[1:], env=env)
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        print("skipped: TensorBoard is not installed in %s (%s)" % (python, e))
        return SKIP
    work = tempfile.mkdtemp(prefix="tessera_tb_")
    try:
        subprocess.run([fixture, os.path.join(work, "fixture")], check=True, timeout=120)
        check_fixture(event_accumulator, os.path.join(work, "fixture"))
        subprocess.run([cli, "digits", "--steps", "200", "--device", "/cpu:0",
                        "--logdir", os.path.join(work, "digits")], check=True, timeout=300,
                       stdout=subprocess.DEVNULL)
        check_digits(event_accumulator, os.path.join(work, "digits"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
