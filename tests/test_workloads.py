"""The workload zoo and loader: every file loads, matches published facts, lowers consistently,
and bad files fail with a located WorkloadError (file and field), never a traceback."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from sim.errors import WorkloadError
from sim.workload import (find_workload_file, load_workload, lower, workload_from_dict,
                          zoo_names)

ROOT = Path(__file__).resolve().parent.parent
BATCH = 8

# Every network the generator writes (tools/gen_workloads.py); the zoo must hold at least these.
ZOO = ["cnn2", "resnet9", "resnet14", "resnet20", "resnet32", "resnet56",
       "resnet18-cifar", "resnet34-cifar", "resnet50-cifar", "resnet101-cifar", "resnet152-cifar",
       "resnet18-imagenet", "resnet34-imagenet", "resnet50-imagenet", "resnet101-imagenet",
       "resnet152-imagenet", "vgg11-cifar", "vgg13-cifar", "vgg19-cifar", "alexnet-cifar",
       "regnetx-400mf", "mobilenet-imagenet"]

# Published parameter counts and forward multiply-accumulates per sample (conv + linear layers).
# torchvision's model pages print "GFLOPS", but the figure counts one multiply-accumulate as one
# operation (fvcore convention): 4.09 for ResNet-50 is its MAC count, not 2x it.
PUBLISHED = {
    "resnet18-imagenet": {
        # https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet18.html
        # (ResNet18_Weights.IMAGENET1K_V1: num_params 11689512, GFLOPS 1.81)
        "params": 11_689_512, "macs": 1.81e9,
        "source": "torchvision resnet18 docs (num_params, GFLOPS)"},
    "resnet50-imagenet": {
        # https://pytorch.org/vision/stable/models/generated/torchvision.models.resnet50.html
        # (ResNet50_Weights.IMAGENET1K_V1: num_params 25557032, GFLOPS 4.09)
        "params": 25_557_032, "macs": 4.09e9,
        "source": "torchvision resnet50 docs (num_params, GFLOPS)"},
    "regnetx-400mf": {
        # torchvision/models/regnet.py, RegNet_X_400MF_Weights.IMAGENET1K_V1 meta:
        # num_params 5495976, _ops 0.414 (docs page: GFLOPS 0.41)
        "params": 5_495_976, "macs": 0.414e9,
        "source": "torchvision regnet_x_400mf weights meta (num_params, _ops)"},
    "mobilenet-imagenet": {
        # Howard et al. 2017, "MobileNets", Table 1 / 8: 1.0 MobileNet-224, 569 million
        # mult-adds, 4.2 million parameters
        "params": 4.2e6, "macs": 569e6,
        "source": "Howard et al. 2017, Table 8 (1.0 MobileNet-224)"},
    "resnet20": {
        # He et al. 2016, Table 6: ResNet-20 0.27M params (option A shortcuts; ours are option B,
        # +2.8k params). MACs: chenyaofo/CIFAR-pretrained-models README, "FLOPs 40.81M" counting
        # conv and linear layers only (its shortcuts are 1x1 projections, as here).
        "params": 0.27e6, "macs": 40.81e6,
        "source": "He et al. 2016 Table 6 (params); chenyaofo/CIFAR-pretrained-models (MACs)"},
    "resnet56": {
        # He et al. 2016, Table 6: ResNet-56 0.85M params. MACs: chenyaofo/CIFAR-pretrained-models
        # README, 125.75M (Li et al. 2017, "Pruning Filters for Efficient ConvNets", Table 1,
        # gives 1.25E8 FLOP for the option-A network, counting MACs).
        "params": 0.85e6, "macs": 125.75e6,
        "source": "He et al. 2016 Table 6 (params); chenyaofo/CIFAR-pretrained-models (MACs)"},
    "vgg19-cifar": {
        # Liu et al. 2017, "Learning Efficient Convolutional Networks through Network Slimming",
        # Table 1: VGGNet (19 layers, BN, one linear) on CIFAR-10, 20.04M params, 7.97e8 FLOPs
        # (= 2 x MACs). da2so/DA2Lite model_zoo/README.md: VGG19 (CIFAR-10) 20.04M params,
        # 0.40G MACs.
        "params": 20.04e6, "macs": 0.40e9,
        "source": "Liu et al. 2017 Table 1 (params); DA2Lite model zoo (MACs)"},
}
TOLERANCE = 0.02


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_workloads", ROOT / "tools/gen_workloads.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------------------------
# (a) every zoo file loads and round-trips


def test_zoo_lists_every_network():
    missing = set(ZOO) - set(zoo_names())
    assert not missing, f"zoo lacks {sorted(missing)}"


@pytest.mark.parametrize("name", ZOO)
def test_zoo_file_loads_and_round_trips(name):
    w = load_workload(name)
    assert w.name == name
    assert w.source and w.dataset in ("cifar10", "imagenet")
    d = w.to_dict()
    w2 = workload_from_dict(d, origin="<round-trip>")
    assert w2.to_dict() == d
    assert w2.layers == w.layers
    assert w2.checksum == w.checksum
    # the dict survives YAML serialization too (what a trace manifest stores)
    w3 = workload_from_dict(yaml.safe_load(yaml.safe_dump(d)), origin="<yaml>")
    assert w3.checksum == w.checksum


def test_generated_files_are_current():
    """The YAML files are what tools/gen_workloads.py writes (edit the generator, then rerun it)."""
    assert _load_generator().main(["--check"]) == 0


# ----------------------------------------------------------------------------------------------
# (b) public facts


def _rel(computed: float, published: float) -> float:
    return (computed - published) / published


@pytest.mark.parametrize("name,quantity", [(n, q) for n in PUBLISHED for q in ("params", "macs")])
def test_public_facts(name, quantity):
    w = load_workload(name)
    computed = w.params() if quantity == "params" else w.macs(1)
    pub = PUBLISHED[name][quantity]
    err = _rel(computed, pub)
    assert abs(err) <= TOLERANCE, (f"{name} {quantity}: computed {computed:,} vs published "
                                   f"{pub:,.0f} ({PUBLISHED[name]['source']}): relative error "
                                   f"{err:+.2%} exceeds {TOLERANCE:.0%}")


def test_torchvision_param_counts_are_exact():
    """torchvision publishes exact counts: the architectures must match to the parameter."""
    for name in ("resnet18-imagenet", "resnet50-imagenet", "regnetx-400mf"):
        assert load_workload(name).params() == PUBLISHED[name]["params"], name


# ----------------------------------------------------------------------------------------------
# (c) GEMM lowering identities (METHODS.md notation)


@pytest.mark.parametrize("name", ZOO)
def test_gemm_shapes(name):
    for l in load_workload(name).layers:
        g = lower(l, BATCH)
        grp, cin_g, cout_g, rs = l.groups, l.c_in // l.groups, l.c_out // l.groups, l.r * l.s
        assert (g["fwd"].m, g["fwd"].n, g["fwd"].k) == (BATCH * l.p * l.q, cout_g, cin_g * rs), l.name
        if l.stride == 1:  # implicit GEMM over dI positions
            assert (g["agbp"].m, g["agbp"].n, g["agbp"].k) == (BATCH * l.h * l.w, cin_g, cout_g * rs), \
                l.name
            assert g["agbp"].form == "implicit"
        else:  # strided: scatter form (GEMM into im2col space, then col2im), K still over C_out
            assert (g["agbp"].m, g["agbp"].n, g["agbp"].k) == (BATCH * l.p * l.q, cin_g * rs, cout_g), \
                l.name
            assert g["agbp"].form == "scatter"
        assert (g["wgc"].m, g["wgc"].n, g["wgc"].k) == (cout_g, cin_g * rs, BATCH * l.p * l.q), l.name
        assert all(x.groups == grp for x in g.values())


@pytest.mark.parametrize("name", ZOO)
def test_phase_flops_equal(name):
    """FWD and WGC always do 2*MACs*batch; AGBP does too wherever the conv keeps its map size."""
    for l in load_workload(name).layers:
        g = lower(l, BATCH)
        want = 2 * l.macs(BATCH)
        assert g["fwd"].flops == want, l.name
        assert g["wgc"].flops == want, l.name
        if (l.h, l.w) == (l.p, l.q):
            assert g["agbp"].flops == want, l.name


def test_agbp_flops_of_strided_convs_equal_forward():
    bad = []
    for name in ("resnet50-imagenet", "resnet9", "regnetx-400mf"):
        for l in load_workload(name).convs:
            if l.stride > 1:
                g = lower(l, BATCH)
                if g["agbp"].flops != g["fwd"].flops:
                    bad.append(f"{name}:{l.name} AGBP/FWD = {g['agbp'].flops / g['fwd'].flops:.2f}")
    assert not bad, "; ".join(bad[:5])


# ----------------------------------------------------------------------------------------------
# (d) structure facts


def test_resnet50_structure():
    w = load_workload("resnet50-imagenet")
    convs = w.convs
    assert len(convs) == 53
    assert sum("downsample" in l.name for l in convs) == 4
    fcs = [l for l in w.layers if l.op == "fc"]
    assert [(l.name, l.c_in, l.c_out) for l in fcs] == [("fc", 2048, 1000)]
    # stride on the 3x3 conv (v1.5), 7x7 output before the pool
    assert w.layer("layer2.0.conv2").stride == 2 and w.layer("layer2.0.conv1").stride == 1
    assert (w.layer("layer4.2.conv3").p, w.layer("layer4.2.conv3").q) == (7, 7)


def test_dbtd_targets():
    alex = load_workload("alexnet-cifar")
    assert alex.convs and all(l.dbtd_target == "dI" for l in alex.convs)
    assert all(l.block == "conv-relu" for l in alex.convs)
    assert [l.c_in for l in alex.layers if l.op == "fc"][0] == 4096  # FC-1 is 4096x2048
    for name in ZOO:
        if name.startswith("resnet"):
            w = load_workload(name)
            assert all(l.dbtd_target == "dO" for l in w.convs), name


def test_residual_nodes_resnet50():
    w = load_workload("resnet50-imagenet")
    nodes = {}
    for s, nblocks in zip(range(1, 5), (3, 4, 6, 3)):
        writers = [f"layer{s}.0.downsample.0"] + [f"layer{s}.{b}.conv3" for b in range(nblocks)]
        stage_nodes = {w.layer(n).residual_node for n in writers}
        assert len(stage_nodes) == 1 and None not in stage_nodes, (s, stage_nodes)
        nodes[s] = stage_nodes.pop()
        # convs inside the branch do not write to the sum
        for b in range(nblocks):
            for c in ("conv1", "conv2"):
                assert w.layer(f"layer{s}.{b}.{c}").residual_node is None
        # every block of the stage reads the sum's channel space
        assert w.layer(f"layer{s}.{nblocks - 1}.conv1").in_space == nodes[s]
    assert len(set(nodes.values())) == 4  # one node per stage


def test_residual_adds_relu():
    """ResNets apply ReLU after the sum; SDGP's ResNet-9 does not."""
    for name, relu in (("resnet18-imagenet", True), ("resnet20", True), ("regnetx-400mf", True),
                       ("resnet9", False)):
        adds = [op for op in load_workload(name).ops if op["op"] == "add"]
        assert adds and all(op.get("relu", False) is relu for op in adds), name


def test_small_networks_geometry():
    r9 = load_workload("resnet9")
    assert [(l.c_in, l.c_out, l.r, l.stride, l.pad) for l in r9.convs] == [
        (3, 128, 3, 1, 1), (128, 256, 5, 2, 2), (256, 256, 3, 1, 1), (256, 256, 3, 1, 1),
        (256, 512, 3, 1, 1), (512, 512, 3, 1, 1), (512, 512, 3, 1, 1), (512, 256, 3, 1, 0)]
    assert all(l.block == "conv-bn-relu" and not l.bias for l in r9.convs)
    assert [(l.c_in, l.c_out) for l in r9.layers if l.op == "fc"] == [(256, 10)]
    # CIFAR ResNets: 6n+2 layers; projection shortcuts only where the shape changes
    for depth in (14, 20, 32, 56):
        w = load_workload(f"resnet{depth}")
        shortcuts = [l for l in w.convs if "shortcut" in l.name]
        assert len(w.layers) - len(shortcuts) == depth
        assert [(l.c_in, l.c_out, l.stride) for l in shortcuts] == [(16, 32, 2), (32, 64, 2)]
    rg = load_workload("regnetx-400mf")
    assert {l.groups * 16 for l in rg.convs if l.groups > 1} == {32, 64, 160, 400}
    assert sum(".proj." in l.name for l in rg.convs) == 4


# ----------------------------------------------------------------------------------------------
# (e) loader errors: WorkloadError naming file and field


GOOD = """\
schema: 1
name: tiny
dataset: cifar10
input: {channels: 3, height: 8, width: 8}
layers:
  - {name: conv1, op: conv, in: x, out: c1, c_out: 4, kernel: 3, pad: 1, bn: true, relu: true}
  - {name: conv2, op: conv, in: c1, out: c2, c_out: 4, kernel: 3, pad: 1, bn: true}
  - {name: add1, op: add, in: [c2, c1], out: s1, relu: true}
  - {name: pool, op: pool, in: s1, out: p, kind: avg, global: true}
  - {name: fc, op: fc, in: p, out: y, c_out: 10}
"""


def _bad(tmp_path, text: str) -> WorkloadError:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(WorkloadError) as ei:
        load_workload(f)
    e = ei.value
    assert e.file == str(f), f"error does not name the file: {e}"
    assert str(e).startswith(str(f) + ": ")
    return e


def test_good_tiny_file_loads(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(GOOD)
    w = load_workload(f)
    assert [l.name for l in w.layers] == ["conv1", "conv2", "fc"]
    assert w.layer("conv2").residual_node == w.layer("conv1").residual_node is not None


@pytest.mark.parametrize("old,new,field,message", [
    # unknown key (a typo in an op)
    ("kernel: 3, pad: 1, bn: true, relu", "kernal: 3, pad: 1, bn: true, relu", r"layers\[0\]\.kernal",
     "unknown key"),
    # unknown top-level key
    ("dataset: cifar10", "datset: cifar10", r"datset", "unknown key"),
    # missing field
    ("out: c2, c_out: 4, ", "out: c2, ", r"layers\[1\]\.c_out", "missing"),
    ("input: {channels: 3, height: 8, width: 8}\n", "", r"input", "missing"),
    # wrong type
    ("c_out: 4, kernel: 3, pad: 1, bn: true}", "c_out: 4, kernel: '3', pad: 1, bn: true}",
     r"layers\[1\] \(conv2\)\.kernel", "expected an integer"),
    ("bn: true, relu: true", "bn: yes please, relu: true", r"layers\[0\] \(conv1\)\.bn",
     "expected true or false"),
    # undefined input tensor
    ("in: c1, out: c2", "in: c9, out: c2", r"layers\[1\] \(conv2\)\.in", "'c9' is not produced"),
    # duplicate layer name
    ("{name: conv2,", "{name: conv1,", r"layers\[1\] \(conv1\)\.name", "duplicate layer name"),
    # add of mismatched shapes
    ("out: c2, c_out: 4, kernel: 3, pad: 1", "out: c2, c_out: 4, kernel: 3, pad: 0",
     r"layers\[2\] \(add1\)\.in", "mismatched shapes"),
    # kernel larger than input
    ("kernel: 3, pad: 1, bn: true, relu", "kernel: 9, pad: 0, bn: true, relu",
     r"layers\[0\] \(conv1\)\.kernel", "does not fit"),
    # malformed YAML
    ("  - {name: fc, op: fc,", "  - {name: fc, op: fc,,", r"line 10", "malformed YAML"),
    # duplicate YAML key
    ("dataset: cifar10", "dataset: cifar10\nname: tiny2", r"line 4", "duplicate key 'name'"),
])
def test_loader_errors(tmp_path, old, new, field, message):
    assert old in GOOD
    e = _bad(tmp_path, GOOD.replace(old, new, 1))
    assert e.field is not None and re.fullmatch(field, e.field), f"field {e.field!r} in: {e}"
    assert message in e.message, str(e)


def test_unknown_zoo_name():
    with pytest.raises(WorkloadError) as ei:
        load_workload("resnet-does-not-exist")
    assert ei.value.field == "workload"
    assert "unknown workload 'resnet-does-not-exist'" in str(ei.value)
    assert "resnet50-imagenet" in str(ei.value)  # lists the known names


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError) as ei:
        load_workload(tmp_path / "nope.yaml")
    assert ei.value.file == str(tmp_path / "nope.yaml")


def test_cli_reports_one_line_not_traceback(tmp_path, capsys):
    from sim.cli import main
    f = tmp_path / "bad.yaml"
    f.write_text(GOOD.replace("in: c1, out: c2", "in: c9, out: c2"))
    assert main(["workload", "show", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith(f"prunesim: error: {f}: layers[1] (conv2).in:")


def test_search_path(tmp_path, monkeypatch):
    """$PRUNESIM_WORKLOADS directories come first; the bundled zoo stays reachable."""
    (tmp_path / "tiny.yaml").write_text(GOOD)
    (tmp_path / "cnn2.yaml").write_text(GOOD.replace("name: tiny", "name: cnn2"))
    monkeypatch.setenv("PRUNESIM_WORKLOADS", str(tmp_path))
    assert load_workload("tiny").name == "tiny"
    assert find_workload_file("cnn2") == tmp_path / "cnn2.yaml"  # shadows the bundled one
    assert "tiny" in zoo_names() and "resnet50-imagenet" in zoo_names()
    assert load_workload("resnet50-imagenet").name == "resnet50-imagenet"


def test_prunetrain_cifar_resnet50_is_the_authors_network():
    """resnet50-bt-cifar against the authors' resnet50_bt_flat (PruneTrain code): a 16-channel
    3x3 stem, 3 stages of 8 bottleneck blocks (1x1, 3x3 with the stage's stride, 1x1 to 4x),
    projections only in each stage's first block, 256 features into the FC; 0.78 M parameters."""
    w = load_workload("resnet50-bt-cifar")
    convs = [l for l in w.layers if l.op == "conv"]
    assert convs[0].c_out == 16 and convs[0].r == 3
    assert len(convs) == 1 + 24 * 3 + 3            # stem, 24 blocks of 3, 3 projections
    assert len({l.residual_node for l in convs if l.residual_node}) == 3    # a node a stage
    inner = {l.c_out for l in convs if l.name.endswith(("conv1", "conv2"))}
    nodes = {l.c_out for l in convs if l.name.endswith("conv3")}
    assert inner == {16, 32, 64} and nodes == {64, 128, 256}
    assert [l.stride for l in convs if l.name.endswith("conv2") and l.stride != 1] == [2, 2]
    fc = w.layers[-1]
    assert fc.op == "fc" and fc.c_in == 256 and fc.c_out == 10
    assert load_workload("resnet50-bt-cifar100").layers[-1].c_out == 100
    assert 0.77e6 < w.params() < 0.79e6


def test_a_depthwise_conv_is_one_channel_space_and_narrows_with_its_groups():
    """MobileNet's depthwise convs (groups = channels): output channel c reads input channel c
    alone, so both sides are one space (the PruneTrain authors keep one channel set through it);
    narrowing it keeps one group per channel. Grouped convs that mix channels (RegNet) stay two
    spaces."""
    from sim.system.trajectory import apply_widths
    mb = load_workload("mobilenet-imagenet")
    dw = {l.name: l for l in mb.layers}["conv4"]
    assert dw.depthwise and dw.in_space == dw.out_space == "conv3" and dw.stride == 2
    assert not {l.name: l for l in mb.layers}["conv5"].depthwise
    narrow = {l.name: l for l in apply_widths(mb, {"conv4": (40, 40)}).layers}["conv4"]
    assert (narrow.c_in, narrow.c_out, narrow.groups, narrow.weight_count) == (40, 40, 40, 360)
    with pytest.raises(ValueError, match="depthwise"):
        apply_widths(mb, {"conv4": (40, 41)})
    rg = next(l for l in load_workload("regnetx-400mf").layers if l.groups > 1)
    assert not rg.depthwise and rg.in_space != rg.out_space


def test_vgg11_with_a_global_last_pool_is_vgg11_at_32_and_also_runs_at_16():
    """vgg11-cifar-gp (the CPU lasso runs' chain): the layers, parameters and MACs of
    vgg11-cifar; with the same weights, the same outputs on 32 x 32 images; and it runs on
    16 x 16 images, on which vgg11-cifar's fifth 2 x 2 pool fails."""
    torch = pytest.importorskip("torch")
    from sim.capture.torchnet import build_model
    ref, gp = load_workload("vgg11-cifar"), load_workload("vgg11-cifar-gp")
    assert [(l.name, l.c_in, l.c_out) for l in ref.layers] == \
        [(l.name, l.c_in, l.c_out) for l in gp.layers]
    assert (ref.params(), ref.macs()) == (gp.params(), gp.macs())
    torch.manual_seed(0)
    a, b = build_model(ref).eval(), build_model(gp).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(a(x), b(x))
        assert b(torch.randn(2, 3, 16, 16)).shape == (2, 10)
        with pytest.raises(RuntimeError):
            a(torch.randn(2, 3, 16, 16))
