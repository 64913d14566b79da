#!/usr/bin/env bash
# `tessera demo` as a newcomer reads it: each of its seven parts ends with one placement summary
# line, the tables only with --log-placement, everything on stdout and, with stderr in the same
# file, in order; part 5 says what its simulated step times mean.
# Usage: demo_output.sh TESSERA_BINARY DIR
set -euo pipefail
tessera=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*"; exit 1; }
# In a pipeline, `grep -q` would exit at its first match, and with pipefail the writer's SIGPIPE
# would fail the check (it did, once in a while): the checks below let grep read everything.

# The lines of `file` from the header of part `n` up to the next header (or the end).
part() { awk -v n="$1" '/^== tessera demo / { inside = index($0, "demo " n "/7") > 0 } inside' "$2"; }

"$tessera" demo --steps 40 >"$dir/plain.out" 2>"$dir/plain.err" || fail "tessera demo exited with $?"
grep -q '^demo: OK$' "$dir/plain.out" || fail "no 'demo: OK'"
for n in 1 2 3 4 5 6 7; do
  count=$(part "$n" "$dir/plain.out" | grep -c 'placement: ' || true)
  [ "$count" = 1 ] || fail "part $n prints $count placement summary lines, not 1"
done
# Part 3 by hand: x, the Const 300, y1 and y on task 0; the Const 66 and y2 on task 1; x crosses
# to task 1 (y2's input) and y2 back to task 0 (y's).
part 3 "$dir/plain.out" | grep -x >/dev/null 'placement: 4 ops on /job:local/task:0/cpu:0, 2 on /job:local/task:1/cpu:0, 2 copies' ||
  fail "part 3's summary: $(part 3 "$dir/plain.out" | grep 'placement: ')"
if grep -q -- ' -> /' "$dir/plain.out" "$dir/plain.err"; then fail "a placement table without --log-placement"; fi
part 5 "$dir/plain.out" | grep >/dev/null '^What the step times mean: the simulated accelerator is this machine' ||
  fail "part 5 does not say what its step times mean"
if grep -q 'not a speed-up' "$dir/plain.out"; then fail "part 5 still says 'not a speed-up'"; fi

# With the tables, stdout and stderr in one file: each part's table inside that part. With
# --logdir, both digits parts write TensorBoard event files (tests/tensorboard_reader_test.py reads
# them with TensorBoard itself; here, the tags are in the files).
"$tessera" demo --steps 40 --log-placement --logdir "$dir/logs" >"$dir/tables.log" 2>&1 ||
  fail "tessera demo --log-placement --logdir exited with $?"
for run in ps_digits digits; do
  files=("$dir/logs/$run"/events.out.tfevents.*)
  [ -s "${files[0]}" ] || fail "no event file in $dir/logs/$run"
  for tag in train/loss test/accuracy weights/mlp/hidden1/w; do
    grep -aq "$tag" "$dir/logs/$run"/events.out.tfevents.* || fail "$run's event files lack the tag $tag"
  done
done
grep -aq 'global_step/sec' "$dir/logs/ps_digits"/events.out.tfevents.* || fail "the chief wrote no global_step/sec"
part 1 "$dir/tables.log" | grep -E >/dev/null '^  c \(Add\) +-> /cpu:0$' || fail "part 1's table lacks 'c (Add) -> /cpu:0'"
part 3 "$dir/tables.log" | grep -E >/dev/null '^  y2 \(Sub\) +-> /job:local/task:1/cpu:0$' || fail "part 3's table lacks y2 on task 1"
# Part 4: replica_device_setter's round robin puts the first two variables on ps 0 and ps 1.
part 4 "$dir/tables.log" | grep -E >/dev/null '^  mlp/hidden1/w \(VariableV2\) +-> /job:ps/task:0/cpu:0$' ||
  fail "part 4's table lacks mlp/hidden1/w on ps 0"
part 4 "$dir/tables.log" | grep -E >/dev/null '^  mlp/hidden1/b \(VariableV2\) +-> /job:ps/task:1/cpu:0$' ||
  fail "part 4's table lacks mlp/hidden1/b on ps 1"
part 4 "$dir/plain.out" | grep -E >/dev/null '^killed ps 1 \(kill -9\) at global step [0-9]+ and restarted it' ||
  fail "part 4 does not show the ps killed and restarted"
part 5 "$dir/tables.log" | grep -E >/dev/null '^  loss \(Mean\) +-> /' || fail "part 5's table lacks the loss"
# Part 7: the LSTM's kernel, made by the cell in dynamic_rnn's scope (TF's name).
part 7 "$dir/tables.log" | grep -E >/dev/null '^  rnn/basic_lstm_cell/kernel \(VariableV2\) +-> /' ||
  fail "part 7's table lacks rnn/basic_lstm_cell/kernel"
echo "demo output: seven summaries, tables only when asked, in order"
