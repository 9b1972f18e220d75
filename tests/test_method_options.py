"""Every method option changes the result of every command that accepts the method, or that
command refuses it with a one-line error (train, replay, prune; sweep and layer parse specs as replay
does). Also: the method-spec parser's one-line errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim.methods import PARAMS, parse_method

# a second value for every parameter (each differs from its default)
ALT = {"p": "0.9", "sigma": "unbiased", "keep": "0.2", "schedule": "2", "k": "3", "nm": "1:4",
       "rescale": "channel", "rho": "0.3", "interval": "4", "fc": "prune", "fused": "true",
       "layers": "ffn", "search": "exhaustive"}
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


@pytest.mark.parametrize("command", ["train", "replay", "prune"])
def test_every_option_changes_the_result_or_is_refused(command, capsys, tmp_path):
    run = {"train": _train, "replay": _replay,
           "prune": lambda s, c: _prune(s, c, tmp_path)}[command]
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
