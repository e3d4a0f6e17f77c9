"""Design-space sweeps on dask (issue 16): the spec, sharded calibration, faults, resume, bad input.

One LocalCluster of 2 worker processes is shared by the module; the models are real trained ones
(digits_cnn, PaddleOCR's direction classifier) with real data.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

from engine.cli import Out, main
from engine.quant.calibrate import calibrate
from engine.quant.config import QuantConfig
from engine.quant.qdq import activation_params
from engine.sweep import shard, worker
from engine.sweep.runner import run_sweep
from engine.sweep.spec import load_spec
from tests.engine.sweep_util import acceptance_spec, digits_entry, write_spec

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("latency_us", "npu_ops", "cpu_ops", "sram_peak_kib", "output_sqnr_db", "cosine", "error")


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(c, set_as_default=False)
    yield client
    client.close()
    c.close()


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _figures(rows) -> dict:
    return {r["key"]: tuple(str(r.get(k) if r.get(k) is not None else "") for k in FIGURES) for r in rows}


def _digits_spec(folder: Path, methods=("minmax", "percentile", "mse"), sram=(48, 512), eval_samples=8,
                 name="spec.yaml") -> Path:
    return write_spec(folder, [digits_entry(folder, eval_samples=eval_samples)],
                      [{"name": "ethos-u55", "vary": {"npu.sram_kib": list(sram)}}],
                      [{"method": m} for m in methods], name=name, shard_samples=16)


# -- data-parallel calibration --------------------------------------------------------------------
def test_sharded_calibration_on_two_workers_gives_the_scales_of_one_process(tmp_path, cluster):
    spec = load_spec(_digits_spec(tmp_path))
    model = spec.models[0]
    graph, data, _ = worker.prepared(model)
    ranges = shard.shard_ranges(len(data), 10)  # 64 samples: 7 shards over the 2 workers
    assert len(ranges) == 7

    def over_cluster(task, *extra):
        return cluster.gather([cluster.submit(task, model, lo, hi, *extra, pure=False) for lo, hi in ranges])

    mm = shard.merge_stats(over_cluster(worker.minmax_shard))
    hist = shard.merge_stats(over_cluster(worker.histogram_shard, mm))
    single = shard.calibrate_sharded(graph, data, histograms=True, shard_samples=len(data))  # one process, one shard
    plain = calibrate(graph, data, QuantConfig(), batch=1)  # the ordinary single-process MinMax calibration
    assert set(hist) == set(single.stats) == set(plain.stats)
    sharded = shard.to_calibration(hist, len(data), data.source)
    for name, obs in single.stats.items():
        assert (mm[name].min, mm[name].max) == (plain.stats[name].min, plain.stats[name].max)
        assert np.array_equal(hist[name].hist, obs.hist) and hist[name].count == obs.count
        for method in ("minmax", "percentile", "entropy", "mse"):
            cfg = QuantConfig(method=method)
            a = activation_params(sharded, name, "int8", cfg)
            b = activation_params(single, name, "int8", cfg)
            assert float(a.scale) == float(b.scale) and int(a.zero_point) == int(b.zero_point), (name, method)


def test_histograms_over_different_ranges_refuse_to_merge():
    from engine.quant.observers import HistogramObserver

    a, b = HistogramObserver(), HistogramObserver()
    a.update(np.array([1.0, -2.0], np.float32))
    b.update(np.array([5.0], np.float32))
    with pytest.raises(ValueError, match="do not merge exactly"):
        a.merge(b)


def test_a_held_out_set_measured_in_shards_gives_the_error_of_one_pass(tmp_path, cluster):
    spec = load_spec(_digits_spec(tmp_path, methods=("percentile",), sram=(48,), eval_samples=64))
    point = spec.points()[0]
    graph, data, _ = worker.prepared(point.model)
    cal = shard.calibrate_sharded(graph, data, histograms=True, shard_samples=16)
    parts = cluster.gather([cluster.submit(worker.error_shard, point, cal, lo, hi, pure=False)
                            for lo, hi in shard.shard_ranges(64, 16)])
    sharded = worker.run_point(point, cal, parts)
    whole = worker.run_point(point, cal)
    assert sharded["output_sqnr_db"] == pytest.approx(whole["output_sqnr_db"], abs=1e-3)
    assert sharded["cosine"] == pytest.approx(whole["cosine"], abs=1e-6)


# -- the acceptance spec --------------------------------------------------------------------------
def test_two_workers_give_the_numbers_of_one_worker_on_two_real_models(tmp_path, cluster):
    spec = load_spec(acceptance_spec(tmp_path))
    assert len(spec.points()) == 8
    two = run_sweep(spec, tmp_path / "two", client=cluster)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as c1, \
            Client(c1, set_as_default=False) as one_client:
        one = run_sweep(spec, tmp_path / "one", client=one_client)
    assert (two.computed, two.failed, one.computed, one.failed) == (8, 0, 8, 0)
    assert _figures(two.rows) == _figures(one.rows)
    rows = _rows(tmp_path / "two" / "results.csv")
    assert {r["model"] for r in rows} == {"digits_cnn", "ppocr_cls"}
    assert {r["npu.sram_kib"] for r in rows} == {"48", "512"}
    assert all(float(r["output_sqnr_db"]) > 10 and int(r["npu_ops"]) > 0 for r in rows)
    cls = {r["npu.sram_kib"]: float(r["latency_us"]) for r in rows if r["model"] == "ppocr_cls"}
    # npu.sram_kib is the Ethos-U's SHRAM: it changes the OFM blocks vela's estimate picks (not
    # monotonically: one big block overlaps less of compute and output than several)
    assert cls["512"] != cls["48"]
    page = (tmp_path / "two" / "sweep.html").read_text(encoding="utf-8")
    assert page.count("<circle") == 8 and "<title>" in page
    assert "<script src" not in page and "<link" not in page and "@import" not in page


# -- resume, faults, Ctrl+C -------------------------------------------------------------------------
def test_resume_after_deleting_three_rows_computes_exactly_three_points(tmp_path, cluster):
    spec = load_spec(_digits_spec(tmp_path))
    first = run_sweep(spec, tmp_path / "out", client=cluster)
    assert (first.points, first.computed) == (6, 6)
    path = tmp_path / "out" / "results.csv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    removed = _figures(_rows(path)[1:4])
    path.write_text("".join([lines[0], lines[1], *lines[5:]]), encoding="utf-8")
    again = run_sweep(spec, tmp_path / "out", client=cluster)
    assert (again.points, again.computed, again.skipped, again.failed) == (6, 3, 3, 0)
    rows = _rows(path)
    assert len(rows) == 6 and len({r["key"] for r in rows}) == 6
    assert {k: v for k, v in _figures(rows).items() if k in removed} == removed


def test_killing_a_worker_mid_sweep_loses_no_row(tmp_path, cluster):
    spec = load_spec(_digits_spec(tmp_path, methods=("minmax", "percentile", "mse", "entropy"),
                                  sram=(48, 128, 512), eval_samples=48))
    total = len(spec.points())
    out = tmp_path / "out"
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("s", run_sweep(spec, out, client=cluster)))
    before = cluster.run(os.getpid)
    t.start()
    deadline = time.monotonic() + 120
    while not (out / "results.csv").exists() or len(_rows(out / "results.csv")) < 2:
        assert time.monotonic() < deadline and t.is_alive(), "the sweep ended before a worker could be killed"
        time.sleep(0.05)
    done_at_kill = len(_rows(out / "results.csv"))
    os.kill(next(iter(before.values())), signal.SIGKILL)
    t.join(180)
    assert not t.is_alive()
    assert done_at_kill < total
    s = result["s"]
    rows = _rows(out / "results.csv")
    assert (s.computed, s.failed, len(rows), len({r["key"] for r in rows})) == (total, 0, total, total)
    cluster.wait_for_workers(2, timeout=60)
    assert set(cluster.run(os.getpid).values()) != set(before.values())  # the nanny replaced the dead one


def test_ctrl_c_stops_cleanly_keeping_every_finished_row(tmp_path):
    spec_path = _digits_spec(tmp_path, methods=("minmax", "percentile", "mse", "entropy"), sram=(48, 128, 512),
                             eval_samples=48)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # its own LocalCluster, and SIGINT to the whole process group, as Ctrl+C in a terminal does. A
    # terminal's foreground job has SIGINT at its default; a suite started in the background (`make
    # test &`) has it ignored, and the child would inherit that and finish instead of stopping.
    proc = subprocess.Popen([sys.executable, "-m", "engine", "sweep", str(spec_path), "-o", str(out),
                             "--workers", "1"], cwd=ROOT, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "results.csv").exists() or not _rows(out / "results.csv"):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted"
    assert "Traceback" not in err
    rows = _rows(out / "results.csv")
    header = out.joinpath("results.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert 1 <= len(rows) < 12
    assert all(len(r) == len(header) and r["key"] and r["latency_us"] and not r["error"] for r in rows)
    assert (out / "sweep.html").is_file() and not list(out.glob("*.tmp"))


def test_a_model_whose_data_does_not_fit_fails_its_points_and_the_sweep_goes_on(tmp_path, cluster):
    from tests.engine.sweep_util import cls_data

    _, photos = cls_data(tmp_path)  # 3x48x192 photos: not digits_cnn's 1x8x8 input
    bad = {**digits_entry(tmp_path), "calib": str(photos)}
    spec = load_spec(write_spec(tmp_path, [digits_entry(tmp_path), bad], ["ethos-u55"],
                                [{"method": "minmax"}, {"method": "percentile"}]))
    s = run_sweep(spec, tmp_path / "out", client=cluster)
    assert (s.points, s.computed, s.failed) == (4, 4, 2)
    rows = _rows(tmp_path / "out" / "results.csv")
    failed = [r for r in rows if r["error"]]
    assert len(failed) == 2 and all("does not fit input 'x'" in r["error"] and not r["latency_us"] for r in failed)
    assert all(r["latency_us"] and r["output_sqnr_db"] for r in rows if not r["error"])


# -- bad input --------------------------------------------------------------------------------------
def _run_cli(argv):
    import io

    o, e = io.StringIO(), io.StringIO()
    code = main(argv, Out(o, e))
    return code, o.getvalue(), e.getvalue()


def _one_error(tmp_path, spec: Path, *extra: str) -> str:
    code, stdout, stderr = _run_cli(["sweep", str(spec), "-o", str(tmp_path / "never"), *extra])
    assert code == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert not (tmp_path / "never").exists()
    return lines[0]


def test_a_spec_naming_a_missing_model_is_one_error_line(tmp_path):
    entry = {**digits_entry(tmp_path), "path": str(tmp_path / "nope.onnx")}
    spec = write_spec(tmp_path, [entry], ["ethos-u55"], [{"method": "minmax"}])
    assert "models[0].path" in _one_error(tmp_path, spec) and "nope.onnx" in _one_error(tmp_path, spec)


def test_an_unknown_target_field_is_named_with_a_suggestion(tmp_path):
    spec = write_spec(tmp_path, [digits_entry(tmp_path)], [{"name": "ethos-u55", "vary": {"npu.sram_kb": [64]}}],
                      [{"method": "minmax"}])
    line = _one_error(tmp_path, spec)
    assert "npu.sram_kb" in line and "did you mean 'npu.sram_kib'" in line


def test_a_vary_value_is_checked_by_the_target_schema(tmp_path):
    spec = write_spec(tmp_path, [digits_entry(tmp_path)], [{"name": "ethos-u55", "vary": {"npu.sram_kib": [64, -1]}}],
                      [{"method": "minmax"}])
    line = _one_error(tmp_path, spec)
    assert "npu.sram_kib" in line and "must be positive" in line


@pytest.mark.parametrize("where", ["grid", "quant", "models"])
def test_an_empty_grid_is_one_error_line(tmp_path, where):
    vary = {"npu.sram_kib": []} if where == "grid" else {"npu.sram_kib": [64]}
    spec = write_spec(tmp_path, [] if where == "models" else [digits_entry(tmp_path)],
                      [{"name": "ethos-u55", "vary": vary}], [] if where == "quant" else [{"method": "minmax"}])
    assert "empty" in _one_error(tmp_path, spec)


def test_a_scheduler_that_does_not_answer_is_a_clear_error_within_ten_seconds(tmp_path):
    import socket

    spec = _digits_spec(tmp_path)
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.monotonic()
    line = _one_error(tmp_path, spec, "--scheduler", f"tcp://127.0.0.1:{port}")
    assert time.monotonic() - t < 10
    assert f"tcp://127.0.0.1:{port}" in line and "no dask scheduler" in line
    with socket.socket() as silent:  # listens but never speaks dask
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        t = time.monotonic()
        line = _one_error(tmp_path, spec, "--scheduler", f"tcp://127.0.0.1:{silent.getsockname()[1]}")
        assert time.monotonic() - t < 10 and "no dask scheduler" in line
    assert "expected an address" in _one_error(tmp_path, spec, "--scheduler", "not-an-address")
