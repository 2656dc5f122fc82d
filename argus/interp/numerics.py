"""Element types in NumPy: storage dtypes and rounding (bf16 and fp8 are emulated in float32)."""

from __future__ import annotations

import numpy as np

from argus.dsl.types import DType


def storage_dtype(dt: DType) -> np.dtype:
    if dt.is_float:
        return np.dtype(np.float64 if dt.bits == 64 else np.float32)
    if dt.kind == "bool":
        return np.dtype(np.bool_)
    return np.dtype({8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}[dt.bits]
                    if dt.kind == "int" else {8: np.uint8, 32: np.uint32}[dt.bits])


def poison(dt: DType) -> float | int:
    """What an output holds before a kernel writes it: NaN for floats, -1 for signed integers, the all-ones
    pattern for unsigned ones (-1 does not fit a u8)."""
    if dt.is_float:
        return np.nan
    if dt.kind == "bool":
        return True
    store = storage_dtype(dt)
    return -1 if np.issubdtype(store, np.signedinteger) else int(np.iinfo(store).max)


def reference_array(a: np.ndarray) -> np.ndarray:
    """An input as the `reference:` block sees it: a copy in float64 (floats) or int64 (integers), so the
    reference computes the mathematical value (i8 100 * 100 is 10000 there; a kernel's i8 product wraps)."""
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    return a.copy()


def random_ints(dt: DType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random contents of an integer tensor. i32 / i64 / u32 hold indices, counts and labels far more often
    than data: small values (0..7) keep them in range. An 8- or 16-bit tensor holds data (quantised values):
    its whole range, so arithmetic that wraps in the element type (i8 100 * 100) shows against the float64
    reference."""
    sd = storage_dtype(dt)
    if dt.kind in ("int", "uint") and dt.bits < 32:
        info = np.iinfo(sd)
        return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(sd)
    return rng.integers(0, 8, size=shape).astype(sd)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept in float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def _round_fp8(x: np.ndarray, mant: int, max_val: float, min_exp: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.abs(x)))
    e = np.maximum(np.where(np.isfinite(e), e, min_exp), min_exp)
    q = 2.0 ** (e - mant)
    r = np.round(x / q) * q
    return np.clip(r, -max_val, max_val).astype(np.float32)


def round_to(x, dt: DType) -> np.ndarray:
    """Values of `x` as they would be stored in dtype `dt` (in the interpreter's storage dtype)."""
    if dt.name == "bf16":
        return round_bf16(np.asarray(x, dtype=np.float32))
    if dt.name == "f16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if dt.name == "f8e4m3":
        return _round_fp8(x, 3, 448.0, -6)
    if dt.name == "f8e5m2":
        return _round_fp8(x, 2, 57344.0, -14)
    if dt.is_float:
        return np.asarray(x, dtype=storage_dtype(dt))
    if dt.kind == "bool":
        return np.asarray(x, dtype=np.bool_)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.trunc(x) if np.asarray(x).dtype.kind == "f" else x).astype(storage_dtype(dt))


# Relative error (Frobenius norm) above which an output does not match the float64 reference.
TOLERANCE = {"bf16": 1e-2, "f16": 4e-3, "f32": 1e-4, "f64": 1e-10, "f8e4m3": 1.5e-1, "f8e5m2": 3e-1}


def tolerance(dt: DType) -> float:
    return TOLERANCE.get(dt.name, 0.0)


# Per-element bound, as a multiple of (|reference| + RMS(reference)): a few units of rounding.
ELEMENT_TOLERANCE = {"bf16": 2.0 ** -6, "f16": 2.0 ** -9, "f32": 1e-5, "f64": 1e-12, "f8e4m3": 2.0 ** -2,
                     "f8e5m2": 2.0 ** -1}


def element_tolerance(dt: DType) -> float:
    return ELEMENT_TOLERANCE.get(dt.name, 0.0)
