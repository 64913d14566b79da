#!/usr/bin/env python3
"""TensorFlow 1 peers of tessera's workloads (tf.compat.v1, graph mode, called from Python).

benchmarks/run --with-tensorflow runs this with the Python of benchmarks/.venv (tensorflow-cpu),
one group of workloads per process, right after the tessera binary of the same group:

  session    session_run_add, session_run_add_8threads, session_run_cond, session_run_while,
             session_run_map_fn
             sess.run(c) of c = a + b on two scalar float constants, the graph built once;
             8 Python threads calling run on one shared session (time = wall / total runs);
             impl "tensorflow" calls sess.run(c), "tensorflow_callable" the callable of
             sess.make_callable(c) (the least Python overhead TensorFlow 1 offers)
             session_run_cond: y = tf.cond(p, 2x, -x), p fed true and false in turn;
             session_run_while: sess.run of a tf.while_loop of 1000 iterations (i + 1, s + x),
             TF1's control flow (v1), parallel_iterations=1, time per iteration
             session_run_map_fn: tf.map_fn(x * 2) over the 1000 rows of a [1000, 256] float32
             constant (TF1's TensorArrays, parallel_iterations=10), time per element
  queue      queue_1to1, queue_4to4
             FIFOQueue(1000, int32 scalars) filled by a QueueRunner with N enqueue threads, emptied
             by N Python threads each running the dequeue (through sess.make_callable, as the
             QueueRunner runs its enqueue); impl "tensorflow" moves one element per run,
             "tensorflow_batch50" uses enqueue_many / dequeue_many(50); the producers keep the
             queue full, so each pass of 20,000 elements is steady state
  transport  transfer_<size>, rtt_<size> (64B, 4KiB, 1MiB, 16MiB, 64MiB) between two
             tf.distribute.Server processes over gRPC on loopback:
             transfer: an int32 variable on /job:ps/task:0 read by an Identity on
             /job:worker/task:0 (this process's server), run as a target by 4 threads at once
             (4 steps in flight, as bench_transport keeps 4 calls in flight);
             rtt: a variable on the worker, an Identity of it on the ps, an Identity of that back
             on the worker: the size crosses both ways, one step at a time
  training   train_{mlp,cnn}_digits_{64,256}: Adam steps of the digits models of tf_digits.py (the
             graphs of benchmarks/training/digits_models.h), a batch of 64 or 256 fed per step;
             train_lstm_seq: Adam steps of tf.nn.dynamic_rnn over a BasicLSTMCell(64), 32 fed
             sequences of 20 steps of 16 features;
             "tensorflow" calls sess.run([loss, train], feed_dict), "tensorflow_callable" the
             callable of sess.make_callable([loss, train], feed_list=[x, y])
  cluster    step_two_tasks, step_one_task, ps_steps_{1,2,4}w, session_transfer_{1MiB,16MiB,64MiB}
             on a cluster of separate server processes (ps + 4 workers), like
             benchmarks/cluster/bench_cluster.cc: the same graphs (c = a + b with b on worker 1; a
             64x256 batch through a 256x256 layer trained by SGD, variables on the ps, one client
             per worker, each with its own graph; the transport group's transfer graph, its
             variable on the ps and its Identity on worker 0, run through worker 0's master)
  cluster_training  ps_train_digits_{1,2,4}w and sync_train_digits_{2,4}w: the digits MLP trained
             with Adam by W workers (MonitoredTrainingSession each, variables over 2 ps tasks by
             replica_device_setter; sync: SyncReplicasOptimizer aggregating W gradients), a cluster
             of server processes per workload; steps/s counts global steps, examples/s every
             worker's batches of 64

Every workload checks its result once before timing (c == 3, the queued elements arrive exactly
once, every transferred byte, the loss falls). Constant folding is off (grappler and the classic
optimizer), so c = a + b really runs its Add, as tessera's does. Each repetition runs the workload
until --min-time seconds have passed; the figure of a repetition is its total time over its total
units. The output (--out FILE) is JSON:
  {"versions": {"tensorflow", "python"}, "results": [{"workload", "impl", "metric", "unit",
   "better", "runs": [...], "via": "python"}], "errors": [{"workload", "error"}]}

Internal: `tf_bench.py --serve CLUSTER_JSON JOB TASK` is one server process; it prints "ready" and
exits when its stdin closes (the parent closed it, or died).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before importing TensorFlow: no INFO/WARNING spam

import numpy as np  # noqa: E402  (installed with tensorflow)
import tensorflow as tf  # noqa: E402

tf1 = tf.compat.v1
tf1.disable_eager_execution()
tf.get_logger().setLevel("ERROR")  # QueueRunner's deprecation notice

KIB = 1024
MIB = 1024 * 1024
SIZES = [("64B", 64, 1000), ("4KiB", 4 * KIB, 1000), ("1MiB", MIB, 64), ("16MiB", 16 * MIB, 8),
         ("64MiB", 64 * MIB, 4)]
WINDOW = 4          # steps in flight for the transfer workloads
QUEUE_ITEMS = 20000  # per pass, all producers together (as benchmarks/queue/harness.h)
QUEUE_CAPACITY = 1000
BATCH = 50
STEPS_PER_WORKER = 20
RUN_TIMEOUT_MS = 60000  # every step gives up after this: a stuck server fails a workload, never hangs it


def session_config():
    """No constant folding (c = a + b must run its Add), operation timeout on every run."""
    from tensorflow.core.protobuf import rewriter_config_pb2
    cfg = tf1.ConfigProto()
    cfg.graph_options.optimizer_options.opt_level = tf1.OptimizerOptions.L0
    cfg.graph_options.optimizer_options.do_constant_folding = False
    cfg.graph_options.rewrite_options.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
    cfg.operation_timeout_in_ms = RUN_TIMEOUT_MS
    return cfg


def pattern(nbytes):
    """The int32 words of an nbytes-long transfer (distinct per word and per size)."""
    i = np.arange(nbytes // 4, dtype=np.uint64)
    w = ((i + 1) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    w ^= np.uint64((nbytes * 0x9E3779B9) & 0xFFFFFFFF)
    return w.astype(np.uint32).view(np.int32)


class Bench:
    def __init__(self, reps, min_time):
        self.reps = reps
        self.min_time = min_time
        self.results = []
        self.errors = []

    def record(self, workload, impl, metric, unit, better, runs):
        self.results.append({"workload": workload, "impl": impl, "metric": metric, "unit": unit,
                             "better": better, "runs": runs, "via": "python"})
        print(f"  tensorflow {workload:26s} {impl:20s} median {sorted(runs)[len(runs) // 2]:.6g} {unit}",
              flush=True)

    def fail(self, workload, what):
        self.errors.append({"workload": workload, "error": what})
        print(f"  tensorflow {workload}: ERROR {what}", flush=True)

    def repeat(self, one_pass):
        """Runs one_pass() (returns (seconds, units)) until min_time has passed, per repetition;
        returns per-repetition units per second."""
        rates = []
        for _ in range(self.reps):
            seconds = units = 0.0
            while seconds < self.min_time or units == 0:
                s, u = one_pass()
                seconds += s
                units += u
            rates.append(units / seconds)
        return rates


def timed_calls(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0


def per_call_rates(bench, fn):
    """Repetitions of fn() called in batches sized to about a tenth of min_time; calls/s."""
    n = 1
    while True:  # size a batch
        t = timed_calls(fn, n)
        if t >= bench.min_time / 10 or n >= 1 << 24:
            break
        n *= 4 if t < bench.min_time / 100 else 2
    return bench.repeat(lambda: (timed_calls(fn, n), n))


def run_threads(ts):
    """Starts the threads `ts` and waits for all of them; the wall seconds that took."""
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def released_together(body, threads, barrier):
    """Starts `threads` threads running body(k), each of which first waits at `barrier` (sized
    threads + 1), releases them together; the wall seconds from the release until all have ended."""
    ts = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def threaded_pass(threads, fn, duration):
    """`threads` threads each call fn() until `duration` has passed; (wall seconds, total calls)."""
    counts = [0] * threads
    barrier = threading.Barrier(threads + 1)
    errors = []

    def body(k):
        barrier.wait()
        end = time.perf_counter() + duration
        c = 0
        try:
            while time.perf_counter() < end:
                fn()
                c += 1
        except Exception as e:  # noqa: BLE001  (reported by the caller)
            errors.append(e)
        counts[k] = c

    wall = released_together(body, threads, barrier)
    if errors:
        raise errors[0]
    return wall, sum(counts)


# ---- session ----

def group_session(bench):
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        c = tf.add(a, b, name="c")
    sess = tf1.Session(graph=g, config=session_config())
    got = sess.run(c)
    if got != 3.0:
        bench.fail("session_run_add", f"correctness check failed: c = {got}, not 3")
        return
    for _ in range(1000):  # warm-up
        sess.run(c)
    # "tensorflow": sess.run(c), as TensorFlow 1 code calls it; "tensorflow_callable": the callable
    # of sess.make_callable(c), the cheapest way Python has to run a step (what QueueRunner uses).
    callable_c = sess.make_callable(c)
    if callable_c() != 3.0:
        bench.fail("session_run_add", "correctness check failed: the callable's c is not 3")
        return
    for impl, fn in (("tensorflow", lambda: sess.run(c)), ("tensorflow_callable", callable_c)):
        rates = per_call_rates(bench, fn)
        bench.record("session_run_add", impl, "time per run", "ns", "lower", [1e9 / r for r in rates])
        if impl == "tensorflow_callable":  # also the peer of tessera's Callable
            bench.record("session_callable_add", impl, "time per call", "ns", "lower", [1e9 / r for r in rates])
    # session_run_cond: y = tf.cond(p, 2x, -x), p fed true and false in turn (TF1's control flow:
    # Switch and Merge, as tessera's).
    tf1.disable_control_flow_v2()  # TF1's Switch/Merge, not TF2's functional If
    with g.as_default():
        p = tf1.placeholder(tf.bool, shape=[], name="p")
        x = tf.constant(3.0, name="x")
        y = tf1.cond(p, lambda: x * 2.0, lambda: -x)
    if sess.run(y, {p: True}) != 6.0 or sess.run(y, {p: False}) != -3.0:
        bench.fail("session_run_cond", "correctness check failed: cond(p, 2x, -x) of x = 3 is not 6 and -3")
    else:
        feeds = ({p: True}, {p: False})
        turn = [0]

        def run_cond():
            turn[0] ^= 1
            return sess.run(y, feeds[turn[0]])

        for _ in range(1000):  # warm-up
            run_cond()
        rates = per_call_rates(bench, run_cond)
        bench.record("session_run_cond", "tensorflow", "time per run", "ns", "lower", [1e9 / r for r in rates])
    # session_run_while: a tf.while_loop of 1000 iterations (i + 1, s + x), TF1's control flow
    # (Enter, Merge, Switch, NextIteration, Exit in the step); ns per iteration.
    with g.as_default():
        x = tf.constant(0.5, name="wx")
        n = tf.constant(1000, name="wn")
        loop = tf1.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x),
                              (tf.constant(0), tf.constant(0.0)), parallel_iterations=1)
    if sess.run(loop[1]) != 500.0:
        bench.fail("session_run_while", "correctness check failed: 1000 iterations of s + 0.5 from 0 is not 500")
    else:
        for _ in range(20):  # warm-up
            sess.run(loop[1])
        rates = per_call_rates(bench, lambda: sess.run(loop[1]))
        bench.record("session_run_while", "tensorflow", "time per iteration", "ns", "lower",
                     [1e9 / (r * 1000) for r in rates])
    # session_run_map_fn: tf.map_fn(x * 2) over the rows of a [1000, 256] float32 constant (TF1's
    # TensorArrays in a while loop, its default parallel_iterations=10); ns per element.
    with g.as_default():
        mx = tf.constant(np.arange(1000 * 256, dtype=np.float32).reshape(1000, 256) % 7, name="mx")
        mapped = tf1.map_fn(lambda e: e * 2.0, mx)
        mapped_sum = tf.reduce_sum(mapped)
    want = float(2.0 * (np.arange(1000 * 256) % 7).sum())
    if sess.run(mapped_sum) != want:
        bench.fail("session_run_map_fn", "correctness check failed: sum(map_fn(x * 2)) is not 2 * sum(x)")
    else:
        for _ in range(5):  # warm-up
            sess.run(mapped)
        rates = per_call_rates(bench, lambda: sess.run(mapped))
        bench.record("session_run_map_fn", "tensorflow", "time per element", "ns", "lower",
                     [1e9 / (r * 1000) for r in rates])
    for impl, fn in (("tensorflow", lambda: sess.run(c)), ("tensorflow_callable", callable_c)):
        threaded_pass(8, fn, 0.2)  # warm-up of the 8 threads
        runs = bench.repeat(lambda fn=fn: threaded_pass(8, fn, bench.min_time))
        bench.record("session_run_add_8threads", impl, "time per run, 8 threads on one session", "ns",
                     "lower", [1e9 / r for r in runs])
    sess.close()


# ---- queue ----

def queue_case(bench, n, batch):
    workload = f"queue_{n}to{n}"
    impl = "tensorflow" if batch == 1 else f"tensorflow_batch{batch}"
    g = tf.Graph()
    with g.as_default():
        q = tf1.FIFOQueue(QUEUE_CAPACITY, [tf.int32], shapes=[[]], name="q")
        if batch == 1:
            enqueue = q.enqueue([tf.constant(1, tf.int32, name="one")])
            dequeue = q.dequeue()
        else:
            enqueue = q.enqueue_many([tf.constant(np.ones(batch, np.int32), name="ones")])
            dequeue = q.dequeue_many(batch)
        close = q.close(cancel_pending_enqueues=True)
        runner = tf1.train.QueueRunner(q, [enqueue] * n)
    sess = tf1.Session(graph=g, config=session_config())
    coord = tf1.train.Coordinator()
    threads = runner.create_threads(sess, coord=coord, start=True)
    per_thread = QUEUE_ITEMS // n // batch
    take = sess.make_callable(dequeue)  # as the QueueRunner's threads run their enqueue

    def one_pass():
        sums = [0] * n
        barrier = threading.Barrier(n + 1)

        def consume(k):
            barrier.wait()
            s = 0
            for _ in range(per_thread):
                s += int(np.sum(take()))
            sums[k] = s

        wall = released_together(consume, n, barrier)
        if sum(sums) != QUEUE_ITEMS:
            raise RuntimeError(f"correctness check failed: {sum(sums)} elements summed, not {QUEUE_ITEMS}")
        return wall, QUEUE_ITEMS

    try:
        one_pass()  # warm-up and check: the producers keep the queue full, so each pass is steady state
        bench.record(workload, impl, "throughput", "elements/s", "higher", bench.repeat(one_pass))
    except Exception as e:  # noqa: BLE001
        bench.fail(workload, f"{impl}: {e}")
    finally:
        coord.request_stop()
        try:
            sess.run(close)
        except Exception:  # noqa: BLE001
            pass
        coord.join(threads, stop_grace_period_secs=10, ignore_live_threads=True)
        sess.close()


def group_queue(bench):
    for n in (1, 4):
        for batch in (1, BATCH):
            queue_case(bench, n, batch)


# ---- servers ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_servers(cluster, tasks):
    """Starts one `--serve` process per (job, task); waits for each to say ready."""
    procs = []
    for job, task in tasks:
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", json.dumps(cluster), job,
                              str(task)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
    deadline = time.time() + 300  # each process imports TensorFlow: slow on a loaded 2-core machine
    for p in procs:
        line = ""
        while "ready" not in line:
            if time.time() > deadline:
                stop_servers(procs)
                raise RuntimeError("a TensorFlow server did not start within 300 s")
            line = p.stdout.readline()
            if not line and p.poll() is not None:
                stop_servers(procs)
                raise RuntimeError(f"a TensorFlow server exited with status {p.returncode}")
    return procs


def stop_servers(procs):
    for p in procs:
        try:
            p.stdin.close()
        except Exception:  # noqa: BLE001
            pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def serve(cluster_json, job, task):
    cluster = tf.train.ClusterSpec(json.loads(cluster_json))
    tf.distribute.Server(cluster, job_name=job, task_index=int(task), config=session_config(), start=True)
    print("ready", flush=True)
    sys.stdin.read()  # until EOF: the parent closed the pipe, or died
    os._exit(0)  # the gRPC server has no clean stop


# ---- transport ----

def windowed_pass(sess, op, transfers, nbytes):
    """WINDOW threads run `op` `transfers` times in all; (wall seconds, bytes moved)."""
    left = [transfers]
    lock = threading.Lock()
    errors = []

    def take():
        with lock:
            left[0] -= 1
            return left[0] >= 0

    def body():
        try:
            while take():
                sess.run(op)
        except Exception as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    seconds = run_threads([threading.Thread(target=body) for _ in range(WINDOW)])
    if errors:
        raise errors[0]
    return seconds, transfers * nbytes


def group_transport(bench, skip_sizes):
    sizes = [s for s in SIZES if s[0] not in skip_sizes]
    cluster = {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    procs = start_servers(cluster, [("ps", 0)])
    try:
        server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=0,
                                      config=session_config(), start=True)
        g = tf.Graph()
        ops = {}
        with g.as_default():
            for name, nbytes, _ in sizes:
                n = nbytes // 4
                feed = tf1.placeholder(tf.int32, [n], name=f"pattern_{name}")
                with tf.device("/job:ps/task:0"):
                    src = tf1.Variable(tf.zeros([n], tf.int32), name=f"src_{name}")
                    read = tf.identity(src.read_value(), name=f"read_{name}")
                with tf.device("/job:worker/task:0"):
                    pulled = tf.identity(read, name=f"pulled_{name}")
                    local = tf1.Variable(tf.zeros([n], tf.int32), name=f"local_{name}")
                with tf.device("/job:ps/task:0"):
                    echoed = tf.identity(local.read_value(), name=f"echo_{name}")
                with tf.device("/job:worker/task:0"):
                    back = tf.identity(echoed, name=f"back_{name}")
                ops[name] = dict(feed=feed, init=[src.assign(feed), local.assign(feed)], pulled=pulled,
                                 back=back)
            init = tf1.global_variables_initializer()
        sess = tf1.Session(server.target, graph=g, config=session_config())
        sess.run(init)
        for name, nbytes, transfers in sizes:
            o = ops[name]
            expected = pattern(nbytes)
            sess.run(o["init"], feed_dict={o["feed"]: expected})
            # Checked once: every byte, both ways.
            got = sess.run(o["pulled"])
            if got.dtype != np.int32 or got.shape != expected.shape or not np.array_equal(got, expected):
                bench.fail(f"transfer_{name}", "correctness check failed: the pulled tensor differs")
                continue
            got = sess.run(o["back"])
            if got.shape != expected.shape or not np.array_equal(got, expected):
                bench.fail(f"rtt_{name}", "correctness check failed: the echoed tensor differs")
                continue
            pull_op, back_op = o["pulled"].op, o["back"].op
            for _ in range(3):  # warm-up
                sess.run(pull_op)
                sess.run(back_op)

            rates = bench.repeat(lambda pull_op=pull_op, transfers=transfers, nbytes=nbytes:
                                 windowed_pass(sess, pull_op, transfers, nbytes))
            bench.record(f"transfer_{name}", "tensorflow", "throughput", "MiB/s", "higher", [r / MIB for r in rates])
            rates = per_call_rates(bench, lambda back_op=back_op: sess.run(back_op))
            bench.record(f"rtt_{name}", "tensorflow", "time per round trip", "µs", "lower", [1e6 / r for r in rates])
        sess.close()
    finally:
        stop_servers(procs)


# ---- cluster ----

def group_cluster(bench, worker_counts):
    workers = max(max(worker_counts), 2)
    cluster = {"ps": [f"127.0.0.1:{free_port()}"],
               "worker": [f"127.0.0.1:{free_port()}" for _ in range(workers)]}
    procs = start_servers(cluster, [("ps", 0)] + [("worker", i) for i in range(workers)])
    target = [f"grpc://{a}" for a in cluster["worker"]]
    try:
        for two_tasks in (True, False):
            workload = "step_two_tasks" if two_tasks else "step_one_task"
            g = tf.Graph()
            with g.as_default():
                with tf.device("/job:worker/task:0"):
                    a = tf.constant(1.0, name="a")
                with tf.device("/job:worker/task:1" if two_tasks else "/job:worker/task:0"):
                    b = tf.add(tf.constant(1.0), tf.constant(1.0), name="b")
                with tf.device("/job:worker/task:0"):
                    c = tf.add(a, b, name="c")
            sess = tf1.Session(target[0], graph=g, config=session_config())
            got = sess.run(c)
            if got != 3.0:
                bench.fail(workload, f"correctness check failed: c = {got}")
                continue
            for _ in range(200):  # warm-up
                sess.run(c)
            rates = per_call_rates(bench, lambda sess=sess, c=c: sess.run(c))
            bench.record(workload, "tensorflow", "time per step", "µs", "lower", [1e6 / r for r in rates])
            sess.close()

        for w in worker_counts:
            clients = []
            for i in range(w):
                g = tf.Graph()
                with g.as_default():
                    with tf.device("/job:ps/task:0"):
                        wv = tf1.Variable(tf.fill([256, 256], 0.001), name="w")
                        bv = tf1.Variable(tf.zeros([256]), name="b")
                    with tf.device(f"/job:worker/task:{i}"):
                        x = tf1.random_uniform([64, 256], dtype=tf.float32, seed=3)
                        h = tf.add(tf.matmul(x, wv.read_value()), bv.read_value())
                        loss = tf.reduce_mean(tf.square(h), name="loss")
                        g_h = tf.multiply(tf.constant(2.0 / (64 * 256)), h)
                        g_w = tf.matmul(x, g_h, transpose_a=True)
                        g_b = tf.reduce_sum(g_h, axis=[0])
                        lr = tf.constant(0.01)
                        train = tf.group(wv.assign_sub(lr * g_w), bv.assign_sub(lr * g_b))
                    init = tf1.global_variables_initializer()
                sess = tf1.Session(target[i], graph=g, config=session_config())
                clients.append((sess, train, loss, init))
            # Variables live on the ps, shared by name between the clients' graphs (between-graph
            # replication); each worker count starts from fresh values.
            s0, _, loss0, init0 = clients[0]
            s0.run(init0)
            before = s0.run(loss0)
            for sess, train, _, _ in clients:
                for _ in range(20):  # warm-up
                    sess.run(train)
            after = s0.run(loss0)
            workload = f"ps_steps_{w}w"
            if not after < before:
                bench.fail(workload, f"correctness check failed: the loss did not fall ({before} -> {after})")
                continue

            def ps_pass(clients=clients, w=w):
                def body(sess, train):
                    for _ in range(STEPS_PER_WORKER):
                        sess.run(train)

                seconds = run_threads([threading.Thread(target=body, args=(s, t)) for s, t, _, _ in clients])
                return seconds, w * STEPS_PER_WORKER

            bench.record(workload, "tensorflow", "training throughput, all workers together", "steps/s", "higher",
                         bench.repeat(ps_pass))
            for sess, _, _, _ in clients:
                sess.close()

        session_transfers(bench, target[0])
    finally:
        stop_servers(procs)


DIGITS_BATCH = 64


def cluster_train_digits(bench, workers, sync, xs, ys):
    """ps_train_digits_<W>w (async) or sync_train_digits_<W>w: the digits MLP (tf_digits.mlp_loss)
    trained with Adam by W workers, each its own graph and MonitoredTrainingSession on its task,
    the variables spread over 2 ps tasks by replica_device_setter; sync wraps Adam in a
    SyncReplicasOptimizer aggregating W gradients. A cluster of its own per workload (the sync
    token queue and the accumulators are shared by name on the ps).

    Async, a pass is STEPS_PER_WORKER steps of each worker. Sync, the workers train without pause
    until the workload ends and a pass is the time the global step takes to advance by
    STEPS_PER_WORKER, as bench_cluster_training does: stopping each worker after a fixed number of
    its own steps can leave one waiting for a token forever (a fast worker's second gradient of a
    step makes a slower one's stale, so fewer global steps happen than the workers expect). At the
    end a session on the chief's graph enqueues a token per worker, so that none stays blocked."""
    import tf_digits
    workload = f"{'sync' if sync else 'ps'}_train_digits_{workers}w"
    cluster = {"ps": [f"127.0.0.1:{free_port()}" for _ in range(2)],
               "worker": [f"127.0.0.1:{free_port()}" for _ in range(workers)]}
    procs = start_servers(cluster, [("ps", 0), ("ps", 1)] + [("worker", i) for i in range(workers)])
    spec = tf.train.ClusterSpec(cluster)
    clients = []
    release = None  # sync: (a session on the chief's graph, its op enqueueing a token per worker)
    threads = []
    stop = threading.Event()
    try:
        for i in range(workers):
            g = tf.Graph()
            with g.as_default():
                with tf1.device(tf1.train.replica_device_setter(cluster=spec, worker_device=f"/job:worker/task:{i}")):
                    x, y, loss = tf_digits.mlp_loss(tf1)
                    step = tf1.train.get_or_create_global_step()
                    opt = tf1.train.AdamOptimizer(1e-3)
                    hooks = []
                    if sync:
                        opt = tf1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=workers,
                                                              total_num_replicas=workers)
                        hooks.append(opt.make_session_run_hook(i == 0))
                    train = opt.minimize(loss, global_step=step)
                    if sync and i == 0:
                        release_op = opt.get_init_tokens_op(num_tokens=workers)
                # The chief first: the others find the model ready at once (a non-chief polls every 30 s).
                sess = tf1.train.MonitoredTrainingSession(
                    master=f"grpc://{cluster['worker'][i]}", is_chief=(i == 0), hooks=hooks, config=session_config(),
                    save_checkpoint_secs=None, save_summaries_steps=None, save_summaries_secs=None,
                    log_step_count_steps=None)
            rows = [(np.arange(k * DIGITS_BATCH, (k + 1) * DIGITS_BATCH) + 7 * i) % len(ys) for k in range(16)]
            clients.append((sess, {"x": x, "y": y, "loss": loss, "train": train, "step": step,
                                   "feeds": [{x: xs[r], y: ys[r]} for r in rows]}))
            if sync and i == 0:
                release = (tf1.Session(f"grpc://{cluster['worker'][0]}", graph=g, config=session_config()), release_op)

        def body(sess, c, n, losses, errors):
            try:
                for k in range(n):
                    losses.append(sess.run([c["loss"], c["train"]], c["feeds"][k % 16])[0])
            except Exception as e:  # noqa: BLE001  (one_pass raises it)
                errors.append(f"{type(e).__name__}: {e}")

        def one_pass(n=STEPS_PER_WORKER):
            """Async: n steps of each worker, on a thread each; raises the first worker's error."""
            losses = [[] for _ in clients]
            errors = []
            seconds = run_threads(
                [threading.Thread(target=body, args=(s, c, n, losses[k], errors)) for k, (s, c) in enumerate(clients)])
            if errors:
                raise RuntimeError(errors[0])
            return seconds, losses

        # Sync: each worker's thread trains until `stop`, reporting the global step it reads.
        progress = {"step": 0, "error": None, "losses": [[] for _ in clients]}
        cond = threading.Condition()

        def free_running(k, sess, c):
            n = 0
            while not stop.is_set():
                try:
                    l, _, g = sess.run([c["loss"], c["train"], c["step"]], c["feeds"][n % 16])
                except Exception as e:  # noqa: BLE001  (reported by wait_for_steps)
                    with cond:
                        if progress["error"] is None and not stop.is_set():
                            progress["error"] = f"worker {k}: {type(e).__name__}: {e}"
                        cond.notify_all()
                    return
                n += 1
                with cond:
                    progress["step"] = max(progress["step"], int(g))
                    progress["losses"][k].append(float(l))
                    cond.notify_all()

        def wait_for_steps(steps):
            """Seconds until the global step advanced by `steps` (bounded); raises a worker's error."""
            t0 = time.perf_counter()
            with cond:
                target = progress["step"] + steps
                if not cond.wait_for(lambda: progress["step"] >= target or progress["error"], timeout=120):
                    raise RuntimeError(f"the global step did not advance by {steps} within 120 s")
                if progress["error"]:
                    raise RuntimeError(progress["error"])
            return time.perf_counter() - t0

        if sync:
            threads.extend(threading.Thread(target=free_running, args=(k, s, c)) for k, (s, c) in enumerate(clients))
            for t in threads:
                t.start()
            wait_for_steps(100)  # warm-up and check
            with cond:
                losses = [list(l) for l in progress["losses"]]
            if not losses[0] or not losses[0][-1] < losses[0][0]:
                bench.fail(workload, f"correctness check failed: worker 0's loss {losses[0][:1]} -> {losses[0][-1:]}")
                return
            rates = bench.repeat(lambda: (wait_for_steps(STEPS_PER_WORKER), STEPS_PER_WORKER))
        else:
            _, losses = one_pass(100)  # warm-up and check
            if not losses[0][-1] < losses[0][0]:
                bench.fail(workload, f"correctness check failed: worker 0's loss {losses[0][0]} -> {losses[0][-1]}")
                return
            # Global steps: one per worker step.
            rates = bench.repeat(lambda: (one_pass()[0], workers * STEPS_PER_WORKER))
        bench.record(workload, "tensorflow", "training steps per second (global steps)", "steps/s", "higher", rates)
        bench.record(workload + "_examples", "tensorflow", "examples per second, all workers together", "examples/s",
                     "higher", [r * DIGITS_BATCH * (workers if sync else 1) for r in rates])
    finally:
        stop.set()
        if release is not None:
            try:
                release[0].run(release[1])  # a worker waiting for a token gets one and sees `stop`
            except Exception as e:  # noqa: BLE001
                print(f"  tensorflow {workload}: releasing the workers failed: {e}", flush=True)
        for t in threads:
            t.join(timeout=RUN_TIMEOUT_MS / 1000 + 10)
        if release is not None:
            release[0].close()
        for sess, _ in reversed(clients):
            try:
                sess.close()
            except Exception:  # noqa: BLE001  (a sync worker's close may see its queue closed)
                pass
        stop_servers(procs)


def group_cluster_training(bench, worker_counts, sync_counts):
    import tf_digits
    xs, ys = tf_digits.load_digits(DIGITS_CSV)
    for sync, counts in ((False, worker_counts), (True, sync_counts)):
        for w in counts:
            try:
                cluster_train_digits(bench, w, sync, xs, ys)
            except Exception as e:  # noqa: BLE001  (one workload's failure does not stop the others)
                bench.fail(f"{'sync' if sync else 'ps'}_train_digits_{w}w", f"{type(e).__name__}: {e}")


def session_transfers(bench, target):
    """session_transfer_<size>: the transport group's transfer on the cluster's separate processes,
    as bench_cluster runs tessera's (ps -> worker 0, through worker 0's master)."""
    sizes = [s for s in SIZES if s[1] >= MIB]
    g = tf.Graph()
    ops = {}
    with g.as_default():
        for name, nbytes, _ in sizes:
            n = nbytes // 4
            with tf.device("/job:ps/task:0"):
                feed = tf1.placeholder(tf.int32, [n], name=f"pattern_{name}")
                src = tf1.Variable(feed, name=f"src_{name}")
            with tf.device("/job:worker/task:0"):
                pulled = tf.identity(src.read_value(), name=f"pulled_{name}")
            ops[name] = dict(feed=feed, init=src.initializer, pulled=pulled)
    sess = tf1.Session(target, graph=g, config=session_config())
    try:
        for name, nbytes, transfers in sizes:
            o = ops[name]
            expected = pattern(nbytes)
            sess.run(o["init"], feed_dict={o["feed"]: expected})
            got = sess.run(o["pulled"])
            workload = f"session_transfer_{name}"
            if got.dtype != np.int32 or got.shape != expected.shape or not np.array_equal(got, expected):
                bench.fail(workload, "correctness check failed: the pulled tensor differs")
                continue
            pull_op = o["pulled"].op
            for _ in range(3):  # warm-up
                sess.run(pull_op)
            rates = bench.repeat(lambda pull_op=pull_op, transfers=transfers, nbytes=nbytes:
                                 windowed_pass(sess, pull_op, transfers, nbytes))
            bench.record(workload, "tensorflow", "throughput", "MiB/s", "higher", [r / MIB for r in rates])
    finally:
        sess.close()


# ---- training ----

DIGITS_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "data", "digits.csv.gz")


class LstmCell:
    """TF 1.15's BasicLSTMCell (rnn_cell_impl.py: one [x, h] kernel, gates i, j, f, o, forget_bias 1),
    written out because TensorFlow 2.21's tf.compat.v1.nn.rnn_cell needs Keras 2; tf.nn.dynamic_rnn
    takes any object with its interface."""

    def __init__(self, units):
        self.units = units
        self.state_size = (units, units)
        self.output_size = units

    def zero_state(self, batch_size, dtype):
        return tuple(tf.zeros([batch_size, self.units], dtype) for _ in range(2))

    def __call__(self, inputs, state, scope=None):
        c, h = state
        with tf1.variable_scope("basic_lstm_cell", reuse=tf1.AUTO_REUSE):
            depth = inputs.shape[-1]
            kernel = tf1.get_variable("kernel", [depth + self.units, 4 * self.units], tf.float32,
                                      tf1.glorot_uniform_initializer())
            bias = tf1.get_variable("bias", [4 * self.units], tf.float32, tf1.zeros_initializer())
        i, j, f, o = tf.split(tf.nn.bias_add(tf.matmul(tf.concat([inputs, h], 1), kernel), bias), 4, axis=1)
        new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
        new_h = tf.tanh(new_c) * tf.sigmoid(o)
        return new_h, (new_c, new_h)


def group_training(bench):
    """train_{mlp,cnn}_digits_{64,256}: Adam steps of tf_digits.py's models (the graphs of
    benchmarks/training/digits_models.h), each fed a batch of digits and fetching the loss; impl
    "tensorflow" calls sess.run([loss, train], feed_dict), "tensorflow_callable" the callable of
    sess.make_callable([loss, train], feed_list=[x, y])."""
    import tf_digits
    xs, ys = tf_digits.load_digits(DIGITS_CSV)
    for model, build in (("mlp", tf_digits.mlp_step), ("cnn", tf_digits.cnn_step)):
        for batch in (64, 256):
            workload = f"train_{model}_digits_{batch}"
            g = tf.Graph()
            with g.as_default():
                x, y, loss, train = build(tf1, 1e-3)
                init = tf1.global_variables_initializer()
            sess = tf1.Session(graph=g)
            sess.run(init)
            rows = [np.arange(i * batch, (i + 1) * batch) % len(ys) for i in range(16)]  # 16 batches, cycled
            feeds = [{x: xs[r], y: ys[r]} for r in rows]
            losses = [sess.run([loss, train], feeds[i % 16])[0] for i in range(50)]  # warm-up and check
            if not (np.isfinite(losses[-1]) and losses[-1] < losses[0]):
                bench.fail(workload, f"correctness check failed: the loss went {losses[0]} -> {losses[-1]} in 50 steps")
                sess.close()
                continue
            step_callable = sess.make_callable([loss, train], feed_list=[x, y])
            counter = [0]

            def run_step(feeds=feeds, counter=counter):
                counter[0] += 1
                sess.run([loss, train], feeds[counter[0] % 16])

            def call_step(rows=rows, counter=counter, step_callable=step_callable):
                counter[0] += 1
                r = rows[counter[0] % 16]
                step_callable(xs[r], ys[r])

            for impl, fn in (("tensorflow", run_step), ("tensorflow_callable", call_step)):
                bench.record(workload, impl, "training steps per second", "steps/s", "higher", per_call_rates(bench, fn))
            sess.close()
    training_lstm(bench)


def training_lstm(bench):
    """train_lstm_seq: Adam steps of tf.nn.dynamic_rnn over a BasicLSTMCell(64) (TF1's while loop and
    TensorArrays), 32 sequences of 20 steps of 16 features, a dense layer on the last h; the batch is
    benchmarks/training/tessera.cc's formula."""
    b_, t_, d_ = np.meshgrid(np.arange(32), np.arange(20), np.arange(16), indexing="ij")
    seq_x = np.sin(0.1 * (320 * b_ + 16 * t_ + d_)).astype(np.float32)
    seq_y = (0.1 * seq_x[:, :, 0].sum(axis=1, dtype=np.float32)).reshape(32, 1).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [32, 20, 16], name="x")
        y = tf1.placeholder(tf.float32, [32, 1], name="y")
        _, state = tf1.nn.dynamic_rnn(LstmCell(64), x, dtype=tf.float32)
        with tf1.variable_scope("dense"):  # (tf1.layers.dense needs Keras 2 too)
            w = tf1.get_variable("kernel", [64, 1], tf.float32, tf1.glorot_uniform_initializer())
            bias = tf1.get_variable("bias", [1], tf.float32, tf1.zeros_initializer())
        pred = tf.matmul(state[1], w) + bias
        loss = tf.reduce_mean(tf.square(pred - y))
        train = tf1.train.AdamOptimizer(1e-3).minimize(loss)
        init = tf1.global_variables_initializer()
    sess = tf1.Session(graph=g)
    sess.run(init)
    feed = {x: seq_x, y: seq_y}
    losses = [sess.run([loss, train], feed)[0] for _ in range(50)]
    if not (np.isfinite(losses[-1]) and losses[-1] < losses[0]):
        bench.fail("train_lstm_seq", f"correctness check failed: the loss went {losses[0]} -> {losses[-1]} in 50 steps")
    else:
        step_callable = sess.make_callable([loss, train], feed_list=[x, y])
        for impl, fn in (("tensorflow", lambda: sess.run([loss, train], feed)),
                         ("tensorflow_callable", lambda: step_callable(seq_x, seq_y))):
            bench.record("train_lstm_seq", impl, "training steps per second", "steps/s", "higher",
                         per_call_rates(bench, fn))
    sess.close()


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", required=True, choices=["session", "queue", "transport", "cluster", "training",
                                                          "cluster_training"])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2, help="seconds per repetition (at least)")
    ap.add_argument("--skip-sizes", default="", help="comma-separated transport sizes to leave out, e.g. 64MiB")
    ap.add_argument("--workers", default="1,2,4", help="worker counts of ps_steps")
    args = ap.parse_args()
    bench = Bench(args.reps, args.min_time)
    try:
        if args.group == "session":
            group_session(bench)
        elif args.group == "queue":
            group_queue(bench)
        elif args.group == "training":
            group_training(bench)
        elif args.group == "cluster_training":
            group_cluster_training(bench, [1, 2, 4], [2, 4])
        elif args.group == "transport":
            group_transport(bench, set(filter(None, args.skip_sizes.split(","))))
        else:
            group_cluster(bench, [int(w) for w in args.workers.split(",")])
    except Exception as e:  # noqa: BLE001  (a failed group still writes what it measured)
        traceback.print_exc()
        bench.fail(args.group, f"{type(e).__name__}: {e}")
    with open(args.out, "w") as f:
        json.dump({"versions": {"tensorflow": tf.__version__, "python": sys.version.split()[0]},
                   "results": bench.results, "errors": bench.errors}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
