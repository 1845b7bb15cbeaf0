"""The compiler's capacity guess: XLA's buffers read from a compiled function as XLA reports
them, and the arithmetic from compiled points to the largest batch within a budget."""

import json

import pytest

from membench.capacity import compiled_guess as cg
from membench.capacity.compiled_guess import CompiledGuessFailed, CompiledPoint

MiB = 2**20


def test_xla_prediction_of_a_small_jitted_function_matches_its_memory_analysis():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from membench.backends.jax_backend.compiled_memory import xla_buffers

    def step(w, x):  # w donated and returned updated, as a train step's state is
        h = jnp.tanh(x @ w)
        return w - 0.1 * (x.T @ h), h.sum()

    w, x = jnp.ones((256, 256), jnp.float32), jnp.ones((64, 256), jnp.float32)
    compiled = jax.jit(step, donate_argnums=0).lower(w, x).compile()
    analysis = compiled.memory_analysis()
    buffers = xla_buffers(compiled)
    assert buffers is not None
    for name in ("argument", "output", "alias", "temp", "generated_code"):
        assert getattr(buffers, name) == getattr(analysis, f"{name}_size_in_bytes")
    assert buffers.argument == w.nbytes + x.nbytes
    assert buffers.peak == (
        analysis.argument_size_in_bytes + analysis.output_size_in_bytes
        - analysis.alias_size_in_bytes + analysis.temp_size_in_bytes
        + analysis.generated_code_size_in_bytes
    )  # fmt: skip
    # the compile-only report's figures, as compiled_guess reads them: XLA's bytes, unchanged
    report = {
        "cell": {"batch_size": 64},
        "xla": {f: getattr(buffers, f) for f in ("argument", "output", "alias", "temp")}
        | {"generated_code": buffers.generated_code},
        "resident_input_bytes": 0,
        "host_rss_after_compile_bytes": 500 * MiB,
        "host_hwm_through_compile_bytes": 510 * MiB,
        "host_hwm_through_build_bytes": 400 * MiB,
    }
    point = CompiledPoint.from_report(report)
    assert point.xla_bytes == buffers.peak
    assert point.run_buffers == buffers.peak - buffers.argument


def test_line_and_largest_multiple_within_the_budget():
    assert cg.line([(4, 100.0), (16, 220.0)]) == (60.0, 10.0)
    # the two largest batches decide: the peak bends a little at small ones
    assert cg.line([(1, 0.0), (4, 100.0), (16, 220.0)]) == (60.0, 10.0)
    with pytest.raises(ValueError):
        cg.line([(4, 1.0), (4, 2.0)])
    assert cg.largest_within(60, 10, 260, 1, 1000) == 20  # 60 + 10 * 20 == 260: fits
    assert cg.largest_within(60, 10, 259, 1, 1000) == 19
    assert cg.largest_within(60, 10, 259, 4, 1000) == 16  # multiples of the step
    assert cg.largest_within(60, 10, 10_000, 4, 50) == 48  # the cap, in steps
    assert cg.largest_within(60, 10, 69, 1, 1000) == 0  # not even one sample
    assert cg.largest_within(60, 0, 100, 2, 64) == 64  # a flat line: the cap


def test_first_batches_are_distinct_multiples_of_the_step():
    assert cg.first_batches(1, 65_536) == (4, 16)
    assert cg.first_batches(4, 65_536) == (4, 16)
    assert cg.first_batches(3, 65_536) == (6, 24)
    assert cg.first_batches(1, 8) == (4, 8)
    assert cg.first_batches(4, 4) == (4, 4)  # one batch is all the cap allows


def synthetic(rest: dict[int, float]):
    """compile_at over a process whose XLA buffers are 100 MiB (the arguments, resident before
    the run) + 10 MiB x batch, whose first run adds 20 MiB + 0.5 MiB x batch beyond them, and
    which holds rest[batch] besides (interpreter, the compiler's leftovers)."""
    calls = []

    def compile_at(batch: int, run_step: bool) -> CompiledPoint:
        calls.append((batch, run_step))
        xla, run = 100 * MiB + 10 * MiB * batch, 10 * MiB * batch
        held = rest[batch] + 100 * MiB
        first = held + run + 20 * MiB + MiB * batch / 2
        return CompiledPoint(
            batch, xla, run, held, held_through_compile=held, held_through_build=300 * MiB,
            checked_first_step=first if run_step else None,
        )  # fmt: skip

    return compile_at, calls


def test_prediction_from_compiled_points_confirms_at_its_answer():
    compile_at, calls = synthetic({4: 500 * MiB, 16: 520 * MiB, 36: 510 * MiB})
    # 520 (the largest rest) + 100 + 20 + 10.5 x B <= 1020 MiB -> B = 36
    found = cg.predict_from(compile_at, 1020 * MiB, 1000, 1)
    assert calls == [(4, True), (16, True), (36, False)]  # the answer compiled, no step run
    assert found.batch == 36
    assert found.bytes_per_sample == pytest.approx(10.5 * MiB)
    assert found.fixed_bytes == pytest.approx(640 * MiB)
    assert found.runtime_base_bytes == pytest.approx(520 * MiB)
    assert found.points == [(b, pytest.approx(640 * MiB + 10.5 * MiB * b)) for b in (4, 16, 36)]


def test_a_larger_rest_at_the_answer_moves_it_down():
    compile_at, _ = synthetic({4: 500 * MiB, 16: 500 * MiB, 38: 560 * MiB})
    found = cg.predict_from(compile_at, 1020 * MiB, 1000, 2)  # 38 first, then the 560 rest
    assert found.batch == 32  # 560 + 120 + 10.5 x 32 = 1016 <= 1020 < 1037


def test_nothing_fits_where_build_alone_exceeds_the_budget():
    compile_at, calls = synthetic({4: 500 * MiB, 16: 500 * MiB})
    assert cg.predict_from(compile_at, 290 * MiB, 1000, 1).batch == 0
    assert len(calls) == 2  # no answer to confirm


def test_no_hook_no_guess(fake_framework):
    assert cg.compiled_guess("resnet50", fake_framework, "baseline", "smoke", 1e9, 64, 1) is None


def test_a_compile_that_prints_no_report_fails_with_its_reason(monkeypatch):
    monkeypatch.setattr(cg, "compiled_memory_module", lambda framework: "no_such_module_here")
    cell = {"workload": "resnet50", "strategy": "baseline", "batch_size": 4}
    with pytest.raises(CompiledGuessFailed, match="printed no report.*No module named"):
        cg.run_compile("jax", cell, timeout=60)


def test_a_failed_compile_says_its_status(monkeypatch, tmp_path):
    module = tmp_path / "says_error.py"
    module.write_text(f"print({json.dumps(json.dumps({'status': 'error', 'reason': 'boom'}))})")
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(cg, "compiled_memory_module", lambda framework: "says_error")
    cell = {"workload": "resnet50", "strategy": "baseline", "batch_size": 4}
    with pytest.raises(CompiledGuessFailed, match="error: boom"):
        cg.run_compile("jax", cell, timeout=60)
