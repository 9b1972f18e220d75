"""Sweeps: hardware globs and grids, synthetic-trace cache, resume, determinism across local
workers and a real Dask cluster, SIGKILL and Ctrl-C mid-run, one-line errors."""
from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.hwconfig import load_hwconfig
from sim.progress import Progress
from sim.results import api
from sim.results import sweep as sw

ROOT = Path(__file__).resolve().parent.parent
CNN2 = str(ROOT / "traces/sample-cnn2-mnist5k")
RESNET20 = str(ROOT / "traces/sample-resnet20-mnist5k")
METHODS = ["dbtd:p=0.99", "sdgp-mag:nm=2:4"]


def by_key(recs: list[dict]) -> dict[str, dict]:
    out = {r["key"]: r for r in recs}
    assert len(out) == len(recs)
    return out


def write_grid(tmp_path, params: dict) -> str:
    p = tmp_path / "grid.yaml"
    p.write_text(json.dumps({"params": params}))  # JSON is YAML
    return str(p)


# ----------------------------------------------------------------------------------------------
# hardware points


def test_grid_variants_are_validated_like_files(tmp_path):
    grid = write_grid(tmp_path, {"sparse_patterns": [["2:4"], ["2:4", "1:4"]],
                                 "hbm_bandwidth": ["1555 GB/s", "3000 GB/s"], "sm_count": [108, 132]})
    hws = sw.hw_points(sw.expand_hw(["a100-sxm4-40gb"]), sw.load_grid(grid), grid)
    assert len(hws) == 8 and len({h.checksum for h, _ in hws}) == 8
    v, combo = hws[-1]
    assert v.name == "a100-sxm4-40gb[sparse_patterns=2:4+1:4,hbm_bandwidth=3000 GB/s,sm_count=132]"
    assert combo == {"sparse_patterns": ["2:4", "1:4"], "hbm_bandwidth": "3000 GB/s", "sm_count": 132}
    assert v.value("hbm_bandwidth") == 3e12 and v.value("sparse_patterns") == ("2:4", "1:4")
    # same as a hwconfig file with `base:` and the same values and sources: same content checksum
    f = tmp_path / "variant.yaml"
    f.write_text(json.dumps({"name": "v", "base": "a100-sxm4-40gb", "params": {
        k: {"value": val, "source": f"override from {grid}"} for k, val in combo.items()}}))
    fromfile = load_hwconfig(f)
    assert fromfile.checksum == v.checksum and fromfile.params == v.params


@pytest.mark.parametrize("params, where, what", [
    ({"hbm_bandwidth": ["1555 GB/s", "3 GB"]}, "params.hbm_bandwidth[1]", "is not a bandwidth"),
    ({"sm_count": [0]}, "params.sm_count[0]", "below the minimum"),
    ({"sparse_patterns": [["2:4"], [2]]}, "params.sparse_patterns[1]", "list of strings"),
    ({"no_such": [1]}, "params.no_such[0]", "unknown parameter"),
    ({"sm_count": 108}, "params.sm_count", "non-empty list"),
])
def test_grid_errors_name_file_and_entry(tmp_path, params, where, what):
    grid = write_grid(tmp_path, params)
    with pytest.raises(ConfigError) as e:
        sw.hw_points(sw.expand_hw(["a100-sxm4-40gb"]), sw.load_grid(grid), grid)
    assert e.value.file == grid and e.value.field == where and what in e.value.message


def test_hw_globs_names_and_duplicates(tmp_path):
    hws = sw.expand_hw([str(ROOT / "hwconfigs/a100-sxm4-*.yaml"), "v100-sxm2"])
    assert [h.name for h in hws] == ["a100-sxm4-40gb", "a100-sxm4-80gb", "v100-sxm2"]
    with pytest.raises(ConfigError, match="no hwconfig file matches"):
        sw.expand_hw([str(tmp_path / "*.yaml")])
    # the same config twice is one point; another config under the same name is refused
    assert len(sw.hw_points(sw.expand_hw(["v100-sxm2", "v100-sxm2"]))) == 1
    clash = tmp_path / "clash.yaml"
    clash.write_text(json.dumps({"name": "v100-sxm2", "base": "v100-sxm2",
                                 "params": {"sm_count": {"value": 2, "source": "test"}}}))
    with pytest.raises(ConfigError, match="also the name of"):
        sw.hw_points(sw.expand_hw(["v100-sxm2", str(clash)]))


# ----------------------------------------------------------------------------------------------
# sweeps


def test_cli_sweep_stores_every_point_with_its_inputs_and_resumes(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    args = ["sweep", "--hw", "a100-sxm4-40gb", "--hw", "xeon-e5-2680v4", "--trace", CNN2,
            "--method", "dbtd:p=0.99", "--db", str(db), "--jobs", "1", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["points"] == 4 and first["stored"] == 4 and first["skipped"] == 0
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["stored"] == 0 and again["skipped"] == 4 and again["groups"] == 0
    recs = api.records(db)
    assert len(recs) == 4
    for r in recs:
        for k in ("key", "hw", "hw_checksum", "hw_path", "hw_overrides", "workload", "trace",
                  "trace_checksum", "batch", "seed", "method", "method_id", "method_params",
                  "prunesim", "step_s", "backprop_speedup"):
            assert k in r
    layers = api.records(db, "layer")
    assert len(layers) == 4 * 5 and {l["point"] for l in layers} == {r["key"] for r in recs}
    # per-layer means add up to the network totals
    for r in recs:
        mine = [l for l in layers if l["point"] == r["key"]]
        assert sum(l["wgc_s"] for l in mine) == pytest.approx(r["wgc_s"], rel=1e-12)


def test_results_identical_inline_pool_and_api_replay(tmp_path):
    hw = ["a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb"]
    inline = api.sweep(hw, traces=[CNN2], methods=METHODS, jobs=1, db=tmp_path / "a.sqlite")
    pooled = api.sweep(hw, traces=[CNN2], methods=METHODS, jobs=2, db=tmp_path / "b.sqlite")
    assert len(inline) == 9
    assert by_key(inline) == by_key(pooled)        # 1 group vs 2 chunks in 2 processes
    rep = api.replay(CNN2, hw, METHODS)
    assert by_key(rep) == {k: {**v, "only_iteration": None} for k, v in by_key(inline).items()}


def test_resume_after_partial_sweep_gives_the_same_records(tmp_path):
    db = tmp_path / "r.sqlite"
    grid = write_grid(tmp_path, {"sm_count": [80, 108]})
    part = api.sweep(["a100-sxm4-40gb"], traces=[CNN2], methods=METHODS[:1], db=db, grid=grid, jobs=1)
    assert len(part) == 4
    full = api.sweep(["a100-sxm4-40gb"], traces=[CNN2], methods=METHODS, db=db, grid=grid, jobs=1)
    fresh = api.sweep(["a100-sxm4-40gb"], traces=[CNN2], methods=METHODS, grid=grid, jobs=1)
    assert len(api.records(db)) == 6 and by_key(full) == by_key(fresh)
    assert {r["hw_overrides"] for r in full} == {'{"sm_count": 80}', '{"sm_count": 108}'}


def test_workload_synthesized_once_and_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("PRUNESIM_CACHE", str(tmp_path / "cache"))
    calls = []
    import sim.traces.synth as synth_mod
    real = synth_mod.synth
    monkeypatch.setattr(synth_mod, "synth", lambda *a, **k: calls.append(a) or real(*a, **k))
    kw = dict(workloads=["cnn2"], batch=4, methods=METHODS[:1], jobs=1)
    a = api.sweep(["a100-sxm4-40gb"], **kw)
    b = api.sweep(["a100-sxm4-40gb"], **kw)
    assert len(calls) == 1 and by_key(a) == by_key(b)
    (entry,) = (tmp_path / "cache" / "traces").iterdir()
    assert entry.name.startswith("cnn2-b4-s0-") and a[0]["trace"] == str(entry)
    assert a[0]["trace_source"] == "synthetic" and a[0]["batch"] == 4
    api.sweep(["a100-sxm4-40gb"], **{**kw, "seed": 1})     # another seed: another trace
    assert len(calls) == 2 and len(list((tmp_path / "cache" / "traces").iterdir())) == 2


def test_group_failure_keeps_finished_points_and_reports_one_line(tmp_path, cnn2_trace, capsys):
    bad = next((cnn2_trace / "tensors").rglob("conv2.dO.npy"))
    bad.write_bytes(bad.read_bytes()[:-8] + b"\0" * 8)      # checksum mismatch when read
    db = tmp_path / "r.sqlite"
    rc = main(["sweep", "--hw", "a100-sxm4-40gb", "--trace", CNN2, "--trace", str(cnn2_trace),
               "--method", "dbtd:p=0.99", "--db", str(db), "--jobs", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("prunesim: error: ") and "conv2.dO.npy" in err
    assert len(api.records(db)) == 2                        # the good trace's points are kept
    assert main(["sweep", "--hw", "a100-sxm4-40gb", "--trace", str(tmp_path / "nope"),
                 "--db", str(db)]) == 2
    assert main(["sweep", "--hw", "a100-sxm4-40gb", "--trace", CNN2, "--batch", "8",
                 "--db", str(db)]) == 2


def test_internal_error_in_one_group_lets_the_others_finish(tmp_path, cnn2_trace, monkeypatch,
                                                            capsys):
    real = sw._run_group
    broken = str(Path(cnn2_trace).resolve())

    def flaky(task):
        if task["trace"] == broken:
            raise ValueError("boom")
        return real(task)
    monkeypatch.setattr(sw, "_run_group", flaky)
    db = tmp_path / "r.sqlite"
    # the failing group comes first: the other one still runs and is stored
    rc = main(["sweep", "--hw", "a100-sxm4-40gb", "--trace", str(cnn2_trace), "--trace", CNN2,
               "--method", "dbtd:p=0.99", "--db", str(db), "--jobs", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("prunesim: error: ") and "internal error (ValueError: boom)" in last
    assert "2 points of the other groups stored" in last
    assert {r["trace"] for r in api.records(db)} == {str(Path(CNN2).resolve())}


def test_cache_model_is_part_of_the_key_exact_and_profile_never_collide(tmp_path, cnn2_trace,
                                                                        capsys):
    db = tmp_path / "r.sqlite"
    base = ["sweep", "--hw", "xeon-e5-2680v4", "--hw", "a100-sxm4-40gb", "--trace", str(cnn2_trace),
            "--method", "dbtd:p=0.99", "--db", str(db), "--jobs", "1", "--json"]

    def run(*extra) -> dict:
        assert main(base + list(extra)) == 0
        return json.loads(capsys.readouterr().out)
    first = run("--cache-model", "profile")
    assert (first["stored"], first["skipped"]) == (4, 0)
    again = run("--cache-model", "profile")                 # same model: resumes, runs nothing
    assert (again["stored"], again["skipped"], again["groups"]) == (0, 4, 0)
    other = run("--cache-model", "exact")                   # the other model: the CPU points rerun
    assert (other["stored"], other["skipped"]) == (2, 2)    # the GPU points are the same points
    assert run()["skipped"] == 4                            # exact is the default
    recs = api.records(db)
    assert len(recs) == 6
    cpu = {(r["cache_model"], r["method_id"]): r for r in recs if r["hw_kind"] == "cpu"}
    assert set(cpu) == {(m, i) for m in ("exact", "profile") for i in ("dense", "dbtd")}
    assert {r["cache_model"] for r in recs if r["hw_kind"] != "cpu"} == {None}
    assert cpu["exact", "dbtd"]["key"] != cpu["profile", "dbtd"]["key"]
    # the model really ran: the two sparse products' miss counts, hence seconds, differ
    assert cpu["exact", "dbtd"]["agbp_s"] != cpu["profile", "dbtd"]["agbp_s"]
    layers = api.records(db, "layer")
    assert {l["cache_model"] for l in layers if l["hw_kind"] == "cpu"} == {"exact", "profile"}
    # replay and the API key a profile point as the sweep does
    rep = api.replay(cnn2_trace, ["xeon-e5-2680v4"], ["dbtd:p=0.99"], cache_model="profile")
    assert {r["key"] for r in rep} == {r["key"] for r in recs if r["cache_model"] == "profile"}
    # only CPU hardware simulates caches: elsewhere the option would change nothing
    rc = main(["sweep", "--hw", "a100-sxm4-40gb", "--trace", str(cnn2_trace), "--db", str(db),
               "--cache-model", "profile"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--cache-model" in err and "no CPU hwconfig" in err


# ----------------------------------------------------------------------------------------------
# Dask


@pytest.fixture(scope="module")
def dask_cluster():
    """One local Dask cluster (two worker processes) for this module's Dask tests: starting and
    stopping one, and importing the simulator in its workers, cost ~5 s a cluster."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        yield cluster


def test_dask_cluster_gives_the_local_records(tmp_path, dask_cluster):
    hw = ["a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb"]
    local = api.sweep(hw, traces=[CNN2], methods=METHODS, jobs=1)
    cluster = dask_cluster
    db = tmp_path / "d.sqlite"
    remote = api.sweep(hw, traces=[CNN2], methods=METHODS, db=db, scheduler=cluster.scheduler_address)
    again = api.sweep(hw, traces=[CNN2], methods=METHODS, db=db, scheduler=cluster.scheduler_address)
    assert by_key(remote) == by_key(local) == by_key(again)
    with pytest.raises(ConfigError, match="cannot connect"):
        api.sweep(hw, traces=[CNN2], methods=METHODS, scheduler="tcp://127.0.0.1:1")


def test_dask_worker_killed_mid_sweep_changes_nothing(tmp_path, dask_cluster):
    """A worker SIGKILLed while it runs a group: the scheduler reruns the group elsewhere and the
    store ends with exactly the records of an undisturbed local run."""
    distributed = pytest.importorskip("distributed")
    import threading
    hw = ["xeon-e5-2680v4", "rpi4b"]            # CPU engines: groups take seconds, a kill lands
    local = api.sweep(hw, traces=[CNN2, RESNET20], methods=["dbtd:p=0.99"], jobs=1)
    db = tmp_path / "k.sqlite"
    cluster = dask_cluster
    out: dict = {}
    th = threading.Thread(target=lambda: out.setdefault("r", api.sweep(
        hw, traces=[CNN2, RESNET20], methods=["dbtd:p=0.99"], db=db,
        scheduler=cluster.scheduler_address)))
    th.start()
    with distributed.Client(cluster.scheduler_address, set_as_default=False) as c:
        killed = None
        deadline = time.time() + 60
        while killed is None and time.time() < deadline and th.is_alive():
            busy = [w for w, tasks in c.processing().items() if tasks]
            if busy:
                pid = c.run(os.getpid, workers=[busy[0]])[busy[0]]
                time.sleep(0.3)                    # well inside the running group
                os.kill(pid, signal.SIGKILL)
                killed = pid
            time.sleep(0.05)
        th.join(timeout=300)
    assert killed is not None, "no worker was busy: nothing was killed"
    assert not th.is_alive()
    assert by_key(out["r"]) == by_key(local) == by_key(api.records(db))
    assert len(api.records(db)) == len(local)


# ----------------------------------------------------------------------------------------------
# interruption: kill -9 and Ctrl-C mid-run, then resume


# Holds the sweep after its first group is stored, so that the signal lands mid-run however
# loaded the machine is (a plain sweep could finish before the test sees its first row).
_HOLD_AFTER_FIRST_GROUP = """
import sys, time
import sim.results.sweep as sweep
from sim.cli import main
run_group, calls = sweep.run_group, []
def held(task):
    calls.append(task)
    if len(calls) > 1:
        time.sleep(120)
    return run_group(task)
sweep.run_group = held
sys.exit(main())
"""


def _sweep_proc(db: Path, *extra: str, hold: bool = False) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PRUNESIM_PROGRESS="0")
    # cnn2 (fast) first, then resnet20 on a CPU model (seconds): the kill lands in between
    entry = ["-c", _HOLD_AFTER_FIRST_GROUP, "sweep"] if hold else ["-m", "sim", "sweep"]
    # the child gets Ctrl-C's default action back: a test run started in the background (`make
    # test &`, nohup) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    return subprocess.Popen([sys.executable, *entry, "--hw", "a100-sxm4-40gb",
                             "--hw", "xeon-e5-2680v4", "--trace", CNN2, "--trace", RESNET20,
                             "--method", "dbtd:p=0.99", "--jobs", "1", "--db", str(db), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_rows(db: Path, proc: subprocess.Popen, timeout: float = 180.0) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout and proc.poll() is None:
        if db.exists():
            try:
                con = sqlite3.connect(db, timeout=5)
                n = con.execute("SELECT COUNT(*) FROM records WHERE kind='network'").fetchone()[0]
                con.close()
                if n:
                    return n
            except sqlite3.OperationalError:
                pass  # schema not created yet
        time.sleep(0.02)
    return 0


@pytest.fixture(scope="module")
def uninterrupted():
    return by_key(api.sweep(["a100-sxm4-40gb", "xeon-e5-2680v4"], traces=[CNN2, RESNET20],
                            methods=["dbtd:p=0.99"], jobs=1))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_sweep_resumes_to_the_uninterrupted_rows(tmp_path, sig, uninterrupted):
    db = tmp_path / "r.sqlite"
    p = _sweep_proc(db, hold=True)
    n = _wait_rows(db, p)
    p.send_signal(sig)
    out, err = p.communicate(timeout=180)   # generous: a loaded 2-core machine is slow to exit
    assert 0 < n < 8, "the signal should land mid-run"
    if sig == signal.SIGINT:   # Ctrl-C: clean message, exit 130, no traceback
        assert p.returncode == 130 and "Traceback" not in err and "rerun" in err
    else:
        assert p.returncode == -signal.SIGKILL
    kept = api.records(db)
    # each point is its own transaction: any number may have landed, each one whole and right
    assert 1 <= len(kept) < 8
    assert all(uninterrupted[k] == v for k, v in by_key(kept).items())
    p = _sweep_proc(db)
    p.communicate(timeout=600)
    assert p.returncode == 0
    resumed = api.records(db)
    assert len(resumed) == 8 and len(api.records(db, "layer")) == 2 * (5 + 22) * 2
    assert by_key(resumed) == uninterrupted


# ----------------------------------------------------------------------------------------------
# progress


def test_progress_bar_silent_off_tty_and_forced_shows_rate_and_eta(monkeypatch):
    monkeypatch.delenv("PRUNESIM_PROGRESS", raising=False)
    s = io.StringIO()
    with Progress(10, "x", stream=s) as bar:
        bar.update(5)
    assert s.getvalue() == ""
    t = [0.0]
    s = io.StringIO()
    bar = Progress(10, "sweep", "points", stream=s, force=True, clock=lambda: t[0])
    t[0] = 2.0
    bar.update(4, note="a100")
    line = s.getvalue().rsplit("\r", 1)[-1]
    assert "4/10 points" in line and "2.00 points/s" in line and "ETA 00:03" in line and "a100" in line
    bar.callback("warning: mapped by depth")     # printed above the bar
    bar.callback("[it 1/1 layer 5/10] conv5")    # one step
    bar.close()
    assert "warning: mapped by depth\n" in s.getvalue() and bar.n == 5 and s.getvalue().endswith("\n")
    monkeypatch.setenv("PRUNESIM_PROGRESS", "0")
    assert not Progress(1, stream=s, force=True).enabled
