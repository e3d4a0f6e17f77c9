"""The worker process that runs the editor's compiles (app/worker_process.py): jobs run in another
process with progress, a cancelled job stops, a crash is one line and the next job starts a new
worker, a stuck worker is killed on quit, and no worker outlives the editor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.worker_process import ProcessTask, WorkerProcess, worker
from tests.app import worker_jobs

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """True when ``pid`` is no running process (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _run(qtbot, task: ProcessTask, signal_name: str = "finished", timeout_ms: int = 120_000):
    with qtbot.waitSignal(getattr(task.signals, signal_name), timeout=timeout_ms) as blocker:
        task.start()
    return blocker.args


def test_a_job_runs_in_the_worker_process_with_progress(qtbot):
    task = ProcessTask(worker_jobs.pid_job, 3, name="pid")
    seen: list[tuple[float, str]] = []
    task.signals.progress.connect(lambda f, t: seen.append((f, t)))
    (pid,) = _run(qtbot, task)
    assert pid != os.getpid()
    assert pid == worker().pid
    qtbot.waitUntil(lambda: seen and seen[-1][0] == 1.0, timeout=5000)
    assert seen[-1] == (1.0, "step 3")


def test_bad_input_in_a_job_is_its_first_line_not_an_internal_error(qtbot):
    task = ProcessTask(worker_jobs.bad_input_job, name="bad input")
    (message,) = _run(qtbot, task, "failed")
    assert message == "model.onnx: input x has no shape"
    assert not task.internal_error


def test_a_cancelled_job_stops_in_the_worker_and_its_result_is_dropped(qtbot):
    task = ProcessTask(worker_jobs.wait_for_cancel_job, 60.0, name="cancel me")
    finished: list[object] = []
    task.signals.finished.connect(finished.append)
    task.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    with qtbot.waitSignal(task.signals.cancelled, timeout=10_000):
        task.cancel()
    assert time.monotonic() - t0 < 5.0
    qtbot.wait(100)
    assert finished == [] and task.result is None


def test_a_crashed_worker_fails_its_job_in_one_line_and_the_next_job_restarts_it(qtbot):
    before = worker().restarts
    (pid_before,) = _run(qtbot, ProcessTask(worker_jobs.pid_job, 1, name="pid"))
    crash = ProcessTask(worker_jobs.crash_job, name="crash")
    (message,) = _run(qtbot, crash, "failed")
    assert "\n" not in message and "worker process stopped" in message and "exit status 3" in message
    assert _wait_gone(pid_before, 5.0)
    (pid_after,) = _run(qtbot, ProcessTask(worker_jobs.pid_job, 1, name="pid"))
    assert pid_after != pid_before
    assert worker().restarts == before + 1


def test_a_stuck_worker_is_killed_on_quit_and_leaves_no_process(qtbot):
    pool = WorkerProcess(warm=False)  # its own worker: the shared one stays up for the other tests
    try:
        task = ProcessTask(worker_jobs.stuck_job, name="stuck")
        pool.ensure_started()
        assert pool.ready.wait(120), "the worker did not start"
        pid = pool.pid
        with qtbot.waitSignal(task.signals.progress, timeout=60_000):  # it runs, holding the GIL
            task.job = pool.submit(task)
        time.sleep(0.2)
        t0 = time.monotonic()
        pool.stop(timeout=1.0)
        assert time.monotonic() - t0 < 5.0
        assert _wait_gone(pid, 5.0), "the stuck worker is still running after quit"
        assert task.done.wait(5.0) and task.error is not None  # its job fails, nothing waits for it
    finally:
        pool.stop()


def test_no_worker_outlives_an_editor_process_that_is_killed(tmp_path):
    script = textwrap.dedent("""
        import os, sys
        from app.worker_process import worker
        w = worker()
        w.ensure_started()
        assert w.ready.wait(120)
        print(w.pid, flush=True)
        os.kill(os.getpid(), 9)  # no atexit, no quit: the pipe closing is all the worker sees
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = int(proc.stdout.split()[0])
    assert _wait_gone(pid, 10.0), f"worker {pid} outlived its editor"


def test_a_worker_crash_during_a_compile_is_one_status_bar_line_and_the_next_compile_restarts_it(qtbot, tmp_path):
    from tests.app.analysis_support import close_analysed, open_analysed, wait_for

    win, dock = open_analysed("digits_cnn", "phone-npu", tmp_path)
    ctl = dock.controller
    try:
        pid = worker().pid
        ctl.set_quant(per_channel=not ctl.settings.quant.per_channel)
        ctl.compile_now()
        assert ctl.state == "running"
        os.kill(pid, signal.SIGKILL)  # as a segfault in a native library would end it
        wait_for(lambda: ctl.state == "failed", 30, "the failed compile")
        note = win.statusBar().currentMessage()
        assert "worker process stopped" in note and "\n" not in note, note
        assert _wait_gone(pid, 5.0)
        ctl.compile_now()
        wait_for(lambda: ctl.state in ("ready", "failed") and not ctl.busy, 180, "the compile after the crash")
        assert ctl.state == "ready", ctl.message
        assert worker().pid != pid
    finally:
        close_analysed(win)


def test_a_hardware_what_if_sends_only_a_reference_to_the_compiled_graph_both_ways(qtbot, tmp_path):
    import dataclasses

    from tests.app.analysis_support import close_analysed, open_analysed, wait_for

    win, dock = open_analysed("digits_cnn", "phone-npu", tmp_path)
    ctl = dock.controller
    try:
        base = ctl.current
        faster = dataclasses.replace(ctl.target, npu=dataclasses.replace(ctl.target.npu, clock_mhz=ctl.target.npu.clock_mhz * 2))
        ctl.set_hardware(faster)
        wait_for(lambda: ctl.current is not base and ctl._resim is None, 60, "the re-simulation")
        res = ctl.current
        assert res.what_if_hardware and res.compile.target.npu.clock_mhz == 2 * base.compile.target.npu.clock_mhz
        # The worker simulated its own copy of the result (the editor sent the id) and sent back a
        # reference to the graphs this process already holds, not copies of them.
        assert res.compile.optimized is base.compile.optimized and res.compile.source is base.compile.source
    finally:
        close_analysed(win)


def test_a_worker_whose_editor_is_gone_before_it_says_ready_leaves_quietly():
    """An editor killed while its worker starts: the worker's first message finds the pipe
    closed and it leaves with status 0 and no traceback on stderr (a crash-recovery run showed
    'BrokenPipeError' there)."""
    code = ("import multiprocessing as mp\n"
            "from app import worker_process\n"
            "editor, worker = mp.Pipe()\n"
            "editor.close()\n"
            "worker_process.serve(worker, warm=False)\n")
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
