#!/usr/bin/env python3
"""Writes tests/testing/numpy_format_cases.h: what TensorFlow 1's LoggingTensorHook prints for each
case, taken from TensorFlow and NumPy themselves (not needed to build or run the tests).

Each case is a constant that a tf.compat.v1 Session runs; the fetched value is printed as the hook
prints it ("%s" % value with np.set_printoptions(suppress=True)). The header holds the fetched
elements exactly (floats as hexadecimal, 16-bit floats as their bits) and the text.

  benchmarks/.venv/bin/python tests/testing/numpy_format_cases.py > tests/testing/numpy_format_cases.h
"""
import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_eager_execution()
f32, f64, f16, bf16, i32, i64, b, s = (tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32,
                                       tf.int64, tf.bool, tf.string)
cases = []


def add(name, value, dtype):
    cases.append((name, value, dtype))


add("scalar_f32_064", np.float32(0.8) * np.float32(0.8), f32)
add("scalar_f32_one", 1.0, f32)
add("scalar_f32_1e15", 1e15, f32)
add("scalar_f32_999999", 999999.0, f32)
add("scalar_f32_1e6", 1e6, f32)
add("scalar_f32_1em5", 1e-5, f32)
add("scalar_f32_1em4", 1e-4, f32)
add("scalar_f32_big", 3e38, f32)
add("scalar_f64_third", 1 / 3, f64)
add("scalar_f64_big", 123456789012345678.0, f64)
add("scalar_f64_1e15", 1e15, f64)
add("scalar_f64_1e16", 1e16, f64)
add("scalar_f64_small", 0.0001, f64)
add("scalar_f64_smaller", 0.00001, f64)
add("scalar_f64_int", 5.0, f64)
add("scalar_f32_nan", float("nan"), f32)
add("scalar_f32_neginf", float("-inf"), f32)
add("scalar_f32_negzero", -0.0, f32)
add("scalar_f16", 0.1, f16)
add("scalar_f16_999", 999.0, f16)
add("scalar_f16_1000", 1000.0, f16)
add("scalar_f16_subnormal", 6e-8, f16)
add("scalar_bf16", 0.1, bf16)
add("scalar_bf16_big", 1e6, bf16)
add("scalar_i32", -7, i32)
add("scalar_i64", -2**63, i64)
add("scalar_bool", True, b)
add("scalar_str", b"hi", s)
add("scalar_str_quote", b"it's", s)
add("scalar_str_escapes", b"a'b\"c\\d\n\t\r\x00\x7f\xff", s)
add("mat_f32", [[1, 2.5], [-3, 4]], f32)
add("vec_f32_exponent", [0.1, 1e-5, 3e38, 16777216.0], f32)
add("vec_f64", [0.1, 1 / 3], f64)
add("vec_f32_small", [1e-9, 1.0, 0.5], f32)
add("vec_f32_tie", [2**-9, 1.0], f32)
add("vec_f64_ties", [0.125, 5e-8, 1.25e-7], f64)
add("vec_f32_nonfinite", [float("nan"), 1.5, float("-inf"), float("inf")], f32)
add("vec_f32_only_nonfinite", [float("nan"), float("inf")], f32)
add("vec_f32_only_nonfinite_neg", [float("-inf"), float("nan")], f32)
add("vec_f32_exponent_nan", [1e10, float("nan"), -2.5], f32)
add("vec_f64_exponent_3_digits", [1e100, -1e-100, 0.0, 1.0], f64)
add("vec_f32_zeros", [0.0, -0.0, 0.0], f32)
add("vec_f32_neg_small", [-1e-9, 2.0], f32)
add("vec_f32_below_1e6", [999999.0, 1.0], f32)
add("vec_f32_1e6", [1e6, 1.0], f32)
add("vec_f64_below_1e8", [99999999.0, 0.5], f64)
add("vec_f64_1e8", [1e8, 0.5], f64)
add("vec_f64_rounds_up", [0.999999999, 9.999999996], f64)
add("vec_f64_long", [123456.789012345, 0.5], f64)
add("vec_f16", [0.1, 65504, -2.0, 0.333], f16)
add("vec_f16_fixed", [0.1, 999.0, -0.5], f16)
add("vec_f16_subnormal", [6e-8, 1.0], f16)
add("vec_bf16", [0.1, 3.0e38, -2.0, 100.5], bf16)
add("vec_i32", [1, -200, 30, 4], i32)
add("vec_i64", [2**40, -1, 0], i64)
add("vec_bool", [True, False, True], b)
add("vec_bool_all_true", [True, True], b)
add("vec_str", [b"a", b"bcd", b"x'y"], s)
add("vec_str_empty", [b"", b"a"], s)
add("vec_f32_wraps", [i * 1.25 for i in range(30)], f32)
add("vec_i32_wraps", list(range(0, 3000, 97)), i32)
add("vec_i64_wraps", [10**15 + i for i in range(10)], i64)
add("vec_str_wraps", [b"word%d" % i for i in range(20)], s)
add("vec_bf16_wraps", [1.0, 2.0] * 30, bf16)
add("mat_f32_rows", [[i * 0.1 + j for i in range(12)] for j in range(3)], f32)
add("mat_f32_rows_wrap", [[i * 1.5 + j for i in range(16)] for j in range(2)], f32)
add("cube_i32", np.arange(24).reshape(2, 3, 4).tolist(), i32)
add("rank4_i32", np.arange(16).reshape(2, 2, 2, 2).tolist(), i32)
add("one_element", [7.0], f32)
add("summary_vec_i32", list(range(1200)), i32)
add("summary_vec_f32", [i * 0.5 for i in range(1001)], f32)
add("summary_mat_i32", np.arange(2000).reshape(40, 50).tolist(), i32)
add("summary_cube_f64", (np.arange(1100) * 1.5).reshape(11, 10, 10).tolist(), f64)
add("summary_narrow_rows", np.arange(1004).reshape(502, 2).tolist(), i32)
add("summary_bool", [i % 3 == 0 for i in range(1001)], b)
add("summary_exactly_threshold", list(range(1000)), i32)

DTYPE = {"float32": "DType::Float32", "float64": "DType::Float64", "float16": "DType::Float16",
         "bfloat16": "DType::BFloat16", "int32": "DType::Int32", "int64": "DType::Int64",
         "bool": "DType::Bool", "string": "DType::String"}


def c_string(data):
    out = []
    for byte in data:
        c = chr(byte)
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif 32 <= byte < 127 and c != "?":
            out.append(c)
        else:
            out.append("\\%03o" % byte)
    return '"' + "".join(out) + '"'


def elements(value, dtype):
    flat = np.asarray(value).reshape(-1)
    if dtype not in ("bool", "string", "float16", "bfloat16") and flat.size > 100:
        step = float(flat[1])  # long cases are step * i: written as the step alone
        if np.array_equal(flat, (np.arange(flat.size) * step).astype(flat.dtype)):
            return "%s, .iota_step = %s" % ("{}", float(step).hex())
    if dtype in ("float32", "float64"):
        return "{" + ", ".join(float(x).hex() if np.isfinite(x) else
                               ("NAN" if np.isnan(x) else ("-INFINITY" if x < 0 else "INFINITY"))
                               for x in flat) + "}"
    if dtype in ("float16", "bfloat16"):
        return "{" + ", ".join(hex(int(x)) for x in flat.view(np.uint16)) + "}"
    if dtype == "bool":
        return "{" + ", ".join("1" if x else "0" for x in flat) + "}"
    if dtype == "string":
        # with its length: a literal alone would end at a NUL byte
        return "{" + ", ".join("std::string(%s, %d)" % (c_string(x), len(x)) if b"\0" in x else c_string(x)
                               for x in flat) + "}"
    return "{" + ", ".join("INT64_MIN" if int(x) == -2**63 else str(int(x)) + "LL" for x in flat) + "}"


print("// Generated by tests/testing/numpy_format_cases.py from TensorFlow %s and NumPy %s: do not edit."
      % (tf.__version__, np.__version__))
print("// Each case: a tensor (dtype, shape, elements) and what TF1's LoggingTensorHook prints for it.")
print("#pragma once")
print()
print('#include "tests/testing/numpy_format_case.h"')
print()
print("namespace tessera::testing {")
print()
print("inline const NumpyFormatCase kNumpyFormatCases[] = {")
with tf.Session() as sess:
    for name, value, dtype in cases:
        fetched = sess.run(tf.constant(value, dtype=dtype))
        np.set_printoptions(suppress=True)  # as LoggingTensorHook._log_tensors
        text = "%s" % (fetched,)
        np.set_printoptions(suppress=False)
        shape = "{" + ", ".join(str(d) for d in np.shape(fetched)) + "}"
        kind = "floats" if dtype.name in ("float32", "float64") else \
            "bits" if dtype.name in ("float16", "bfloat16") else \
            "bools" if dtype.name == "bool" else "strings" if dtype.name == "string" else "ints"
        print("    {%s, %s, Shape%s, {.%s = %s},\n     %s}," % (
            c_string(name.encode()), DTYPE[dtype.name], shape, kind, elements(fetched, dtype.name),
            c_string(text.encode())))
print("};")
print()
print("}  // namespace tessera::testing")
