"""cuBLASLt plan lifetimes (:mod:`ember._src.gpu.cuda_blaslt`) against the recording library of
``tests/gpu/fake_cuda.py``: the heuristic's preference object is destroyed after the query, a
product without an algorithm leaves nothing behind, the plan cache keeps the most recently used
shapes, and an evicted plan's descriptor and layouts are destroyed once no step holds it (never
while one does: the fake fails a call on a destroyed object)."""

from __future__ import annotations

import gc
import types

import pytest

from ember._src.gpu import cuda_blas, cuda_blaslt
from tests.gpu.fake_cuda import RecordingBlasLt


def _args(m: int, n: int = 8, k: int = 4) -> dict:
    """A column-major call's arguments as :func:`.cuda_blas.gemm_arguments` lays them out."""
    return {"transa": 0, "transb": 0, "m": m, "n": n, "k": k, "A": 0x100, "B": 0x200, "C": 0x300,
            "Atype": 0, "Btype": 0, "Ctype": 0, "lda": m, "ldb": k, "ldc": m, "strideA": 0, "strideB": 0,
            "strideC": 0, "batchCount": 1, "computeType": cuda_blas.COMPUTE_32F}


def _lt(algorithms: int = 1) -> tuple[cuda_blaslt.Lt, RecordingBlasLt]:
    lib = RecordingBlasLt(algorithms=algorithms)
    lt = cuda_blaslt.Lt(lib)
    lt.prepare(lambda nbytes: types.SimpleNamespace(ptr=0xE000))
    return lt, lib


def test_the_preference_is_destroyed_after_the_query() -> None:
    lt, lib = _lt()
    plan = lt.plan(_args(16), "relu_bias", 0x400)
    assert plan is not None and lt.plan(_args(16), "relu_bias", 0x500) is plan  # one plan per shape
    assert lib.live("preference") == [] and len(lib.live("desc")) == 1 and len(lib.live("layout")) == 3
    kinds = [c[1] for c in lib.calls if c[0] == "destroy"]
    assert kinds == ["preference"]


def test_no_algorithm_leaves_no_objects() -> None:
    lt, lib = _lt(algorithms=0)
    assert lt.plan(_args(16), "bias", 0x400) is None
    assert lib.live("desc") == [] and lib.live("layout") == [] and lib.live("preference") == []


def test_evicted_plans_are_destroyed_once_no_step_holds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_blaslt, "MAX_PLANS", 2)
    lt, lib = _lt()
    held = cuda_blaslt.LtStep.make(lt, None, _args(16), "bias", 0x400)  # a program's step holds plan 1
    first = held.plan.desc
    p2 = lt.plan(_args(32), "bias", 0x400)
    desc2 = p2.desc
    del p2
    lt.plan(_args(48), "bias", 0x400)  # evicts the first shape's plan (the least recently used)
    assert len(lt.plans) == 2 and first in lib.live("desc")  # still held: not destroyed
    held.issue(None, 0x5001)  # and still usable (the fake fails a call on a destroyed object)
    (call,) = [c[1] for c in lib.calls if c[0] == "matmul"]
    assert call["desc"]["attrs"][cuda_blaslt.DESC_BIAS_POINTER] == 0x400
    lt.plan(_args(32), "bias", 0x400)  # used again: now the most recent
    lt.plan(_args(64), "bias", 0x400)  # evicts the 48 plan, keeps 32
    assert desc2 in lib.live("desc")
    del held
    gc.collect()
    assert first not in lib.live("desc")
    assert len(lib.live("desc")) == 2 and len(lib.live("layout")) == 6  # the two cached plans


def test_a_failed_plan_destroys_what_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    lt, lib = _lt()
    monkeypatch.setattr(lib, "cublasLtMatmulAlgoGetHeuristic", lambda *a: 7)  # a cuBLAS error status
    with pytest.raises(RuntimeError, match="cublasLtMatmulAlgoGetHeuristic failed"):
        lt.plan(_args(16), "bias", 0x400)
    assert lib.live("desc") == [] and lib.live("layout") == [] and lib.live("preference") == []
