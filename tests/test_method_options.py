"""Every method option changes the result of every command that accepts the method, or that
command refuses it with a one-line error: train, replay (methods alone and each gradient method
combined with prunetrain), prune, layer, sweep (its specs parse and replay as replay's: its
refusals are walked) and capture (its method-spec validation: a capture run trains a network).
Also: the method-spec parser's one-line errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim.methods import PARAMS, parse_method

# a second value for every parameter (each differs from its default)
ALT = {"p": "0.9", "sigma": "unbiased", "keep": "0.2", "schedule": "2", "k": "3", "nm": "1:4",
       "rescale": "channel", "rho": "0.3", "interval": "4", "fc": "prune", "fused": "true",
       "layers": "ffn", "search": "exhaustive", "wd": "0.001",
       "timing": "authors"}
TRACE = "traces/sample-resnet20-mnist5k"


def _cases():
    for mid, params in PARAMS.items():
        for k, (_, default) in params.items():
            assert ALT[k] != str(default), (mid, k)
            yield mid, k


from conftest import run_main as _run  # noqa: E402  (prunesim ARGV in-process)


def _refused(rc, err) -> bool:
    lines = err.strip().splitlines()
    return rc == 2 and len(lines) == 1 and lines[0].startswith("prunesim: error:")


_cache: dict = {}


def _train(spec, capsys):
    argv = ["train", "--workload", "resnet20", "--cluster", "prunetrain-v100-128", "--gpus", "4",
            "--epochs", "12" if spec.startswith("prunetrain") else "1", "--method", spec, "--json"]
    rc, out, err = _run(argv, capsys)
    if rc:
        return rc, err, None
    d = json.loads(out)["method"]
    d.pop("method")
    return rc, err, d


def _replay(spec, capsys):
    from sim.errors import PrunesimError
    from sim.results.api import replay
    try:
        recs = replay(TRACE, ["a100-sxm4-40gb"], [spec], iteration=None)
    except PrunesimError as e:
        return 2, f"prunesim: error: {e}\n", None
    r = [r for r in recs if r["method"] != "dense"]
    keep = lambda d: {k: v for k, v in d.items() if k not in ("key", "method", "method_params",
                                                              "label")}
    return 0, "", [keep(x) for x in r]


def _prune(spec, capsys, tmp):
    x = np.random.default_rng(0).standard_normal((4, 8, 6, 6)).astype(np.float32)
    np.save(tmp / "g.npy", x)
    rc, out, err = _run(["prune", str(tmp / "g.npy"), str(tmp / "o.npy"), "--method", spec,
                         "--json"], capsys)
    if rc:
        return rc, err, None
    return rc, err, np.load(tmp / "o.npy").tobytes()


_HALF: dict = {}


def _half_trajectory() -> str:
    """A trajectory file: every channel space but the input's and the classes' at half its
    channels from epoch 5 on (multiples of 4 stay multiples of 2: w24/w24t still apply)."""
    if "path" not in _HALF:
        import tempfile

        from sim.methods.prunetrain import space_channels
        from sim.system.trajectory import layer_widths
        from sim.traces.format import open_trace
        w = open_trace(TRACE).workload
        chans = space_channels(w)
        fixed = {w.layers[0].in_space, w.layers[-1].out_space}
        width = {sp: c if sp in fixed else max(1, c // 2) for sp, c in chans.items()}
        f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        f.write(f"workload: {w.name}\npoints:\n  5:\n" + "".join(
            f"    {n}: [{a}, {b}]\n" for n, a, b in layer_widths(w, chans, width)))
        f.close()
        _HALF["path"] = f.name
    return _HALF["path"]


def _replay_combined(spec, capsys):
    """Each gradient method combined with prunetrain at a late iteration (a half-width trajectory
    file); prunetrain's own options combined with sdgp-mag on the model trajectory of
    200k-sample epochs (past the lasso's onset by epoch 4), the options not walked set where
    they narrow the network by then."""
    mid, _, opts = spec.partition(":")
    if mid == "dense":
        return 2, "prunesim: error: dense composes with nothing\n", None
    kw = {"iteration": 600}
    if mid == "prunetrain":
        given = {"rho": "0.7", "interval": "3", **dict(o.split("=") for o in opts.split(",") if o)}
        combo = "prunetrain:" + ",".join(f"{k}={v}" for k, v in given.items()) + "+sdgp-mag"
        kw.update(train_samples=200_000, iteration=None)  # every epoch: where the widths change
    else:
        combo = f"prunetrain+{spec}"
        kw["trajectory"] = _half_trajectory()
    from sim.errors import PrunesimError
    from sim.results.api import replay
    try:
        recs = replay(TRACE, ["a100-sxm4-40gb"], [combo], **kw)
    except PrunesimError as e:
        return 2, f"prunesim: error: {e}\n", None
    r = [r for r in recs if r["method"] != "dense"]
    keep = lambda d: {k: v for k, v in d.items() if k not in ("key", "method", "method_params",
                                                              "label", "trajectory")}
    return 0, "", [keep(x) for x in r]


def _layer(spec, capsys):
    argv = ["layer", "--hw", "a100-sxm4-40gb", "--workload", "resnet20", "--layer", "5",
            "--method", spec, "--json"]
    rc, out, err = _run(argv, capsys)
    if rc:
        return rc, err, None
    d = json.loads(out)
    for run in d.get("runs", []):
        run.pop("method", None)
    d.pop("method", None)
    return rc, err, json.dumps(d, sort_keys=True)


@pytest.mark.parametrize("command", ["train", "replay", "replay-combined", "prune", "layer"])
def test_every_option_changes_the_result_or_is_refused(command, capsys, tmp_path):
    run = {"train": _train, "replay": _replay, "replay-combined": _replay_combined,
           "layer": _layer, "prune": lambda s, c: _prune(s, c, tmp_path)}[command]
    silent = []
    for mid, k in _cases():
        base = (command, mid)
        if base not in _cache:
            _cache[base] = run(mid, capsys)
        rc0, _, r0 = _cache[base]
        if rc0:          # the command refuses the method itself
            continue
        rc, err, r = run(f"{mid}:{k}={ALT[k]}", capsys)
        if rc:
            assert _refused(rc, err), (mid, k, err)
        elif r == r0:
            silent.append(f"{mid}:{k}")
    assert not silent, f"{command}: options accepted but changing nothing: {silent}"


def test_sweep_refuses_what_replay_refuses():
    """sweep parses and replays its method axis as replay does (sim.replay.parse_methods): the
    same options are refused, alone and combined with prunetrain."""
    from sim.replay import parse_methods
    from sim.errors import ConfigError

    def refused(spec, command):
        try:
            parse_methods([spec], command)
        except ConfigError:
            return True
        return False
    for mid, k in _cases():
        for spec in (f"{mid}:{k}={ALT[k]}", f"prunetrain+{mid}:{k}={ALT[k]}"):
            assert refused(spec, "sweep") == refused(spec, "replay"), spec


def test_capture_options_are_read_or_refused():
    """capture's method-spec validation (a capture run trains a network: too slow to walk): every
    option it accepts for a method with a PyTorch twin is read by the capture code or by the
    method's twins (Method.torch_twin, torch_fc_prune), the others are refused in one line
    (CaptureError naming --method)."""
    import inspect
    import pathlib

    from sim.capture.methods import as_spec
    from sim.errors import CaptureError
    from sim.methods import method_for
    capture = "".join(f.read_text() for f in pathlib.Path("sim/capture").glob("*.py"))
    unread = []
    for mid, k in _cases():
        try:
            as_spec(mid)
        except CaptureError:
            continue          # no PyTorch twin: the method itself is refused
        try:
            as_spec(f"{mid}:{k}={ALT[k]}")
        except CaptureError as e:
            assert e.field == "--method" and "\n" not in str(e), (mid, k)
            continue
        twins = "".join(inspect.getsource(getattr(type(method_for(mid)), f))
                        for f in ("torch_twin", "torch_fc_prune"))
        if f'"{k}"' not in capture + twins:
            unread.append(f"{mid}:{k}")
    assert not unread, f"capture accepts options its code never reads: {unread}"


def test_duplicate_keys_are_refused(capsys):
    with pytest.raises(ValueError, match="twice"):
        parse_method("dbtd:p=0.9,p=0.1")
    rc, _, err = _run(["train", "--workload", "resnet20", "--cluster", "gtx1080ti-11gb",
                       "--method", "prunetrain:rho=0.2,rho=0.25", "--epochs", "1"], capsys)
    assert _refused(rc, err) and "twice" in err


def test_given_records_only_written_options():
    s = parse_method("prunetrain:rho=0.25")
    assert s.given == ("rho",) and s.get("interval") == 10
    assert s == parse_method("prunetrain:rho=0.25,interval=10")   # equality ignores `given`


def test_train_reads_prunetrains_options_in_a_combination(capsys):
    """`train --method prunetrain:K=V+sdgp-mag`: every PruneTrain option changes the combined
    run (the channels, their epochs, the step's group-lasso kernels and their timing), as alone."""
    rc, _, base = _train("prunetrain+sdgp-mag", capsys)
    assert rc == 0
    silent = []
    for k in PARAMS["prunetrain"]:
        rc, err, r = _train(f"prunetrain:{k}={ALT[k]}+sdgp-mag", capsys)
        assert rc == 0, (k, err)
        if r == base:
            silent.append(k)
    assert not silent, f"prunetrain options a combination ignores in train: {silent}"


def test_replay_cluster_estimate_runs_a_prunetrain_column_on_its_trajectory():
    """replay --cluster: a PruneTrain column's training estimate narrows the network along the
    column's own trajectory (as its replayed rows do) and charges the group lasso; its timing
    option acts there too."""
    from sim.methods import parse_combination
    from sim.replay import Combined, training_report
    from sim.system.cluster import load_cluster
    from sim.system.prunetrain import simulate_run
    from sim.traces.format import open_trace
    tr = open_trace(TRACE)
    cl = load_cluster("dgx-a100-hdr").with_devices(8)

    def col(spec):
        plan, *rest = parse_combination(spec)
        return Combined(plan, rest[0] if rest else parse_method("dense"), epochs=12,
                        samples=200_000)
    wall, auth = col("prunetrain:rho=0.7,interval=3"), col("prunetrain:rho=0.7,interval=3,"
                                                             "timing=authors")
    rows = {r["method"]: r for r in training_report(tr, [parse_method("dense"), wall, auth], cl,
                                                    12, 200_000)}
    assert rows[wall.label]["train_s"] > rows[auth.label]["train_s"]
    unnarrowed = simulate_run(tr.workload, cl, wall.plan, epochs=12, batch=tr.batch,
                              samples=200_000)
    assert rows[wall.label]["train_s"] < unnarrowed.train_seconds
