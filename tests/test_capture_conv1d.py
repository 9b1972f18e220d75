"""Capture of Conv1d and ConvTranspose2d layers and the one-line warning for modules the workload
cannot hold."""
import warnings

import pytest

from sim.workload import lower

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
nn = torch.nn


class Net1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 5, stride=2, bias=False)
        self.act = nn.ReLU()
        self.c2 = nn.Conv1d(8, 6, 3)
        self.fc = nn.Linear(6 * 9, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.c2(self.act(self.c1(x))), 1))


class WithDeconv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(2 * 16 * 16, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.norm(self.up(self.c(x))), 1))


class Deconv(nn.Module):
    """conv 3x8x8 -> 4x8x8, deconv (k4, s2, p1) -> 6x16x16 with ReLU, fc."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1, bias=False)
        self.act = nn.ReLU()
        self.fc = nn.Linear(6 * 16 * 16, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.act(self.up(self.c(x))), 1))


def test_conv1d_lowers_to_hand_derived_gemms():
    from sim.capture.torchnet import workload_from_model
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # nothing is left out: no warning
        wl = workload_from_model(Net1d(), torch.zeros(2, 4, 25), "n1d")
    c1, c2, fc = wl.layers
    # c1: L = 25, k = 5, stride 2 -> L_out = (25 - 5) // 2 + 1 = 11 on a 1 x L map
    assert (c1.h, c1.w, c1.p, c1.q, c1.r, c1.s, c1.relu) == (1, 25, 1, 11, 1, 5, True)
    g = lower(c1, 2)
    assert (g["fwd"].m, g["fwd"].n, g["fwd"].k) == (2 * 11, 8, 4 * 5)
    assert (g["wgc"].m, g["wgc"].n, g["wgc"].k) == (8, 4 * 5, 2 * 11)
    # strided: scatter-form AGBP M = N*L_out, N = C_in*k, K = C_out
    assert (g["agbp"].m, g["agbp"].n, g["agbp"].k, g["agbp"].form) == (22, 20, 8, "scatter")
    g2 = lower(c2, 2)   # L = 11, k = 3 -> 9; stride 1: implicit AGBP M = N*L, K = C_out*k
    assert (c2.q, g2["agbp"].m, g2["agbp"].n, g2["agbp"].k) == (9, 2 * 11, 8, 6 * 3)
    assert fc.c_in == 6 * 9   # the flattened 6 x 1 x 9 output of c2


def test_capture_records_conv1d_tensors(tmp_path):
    from sim.capture.hooks import Capture
    from sim.traces.format import open_trace
    model = Net1d()
    x, y = torch.randn(4, 4, 25), torch.tensor([0, 1, 2, 0])
    with Capture(model, tmp_path / "t", example_input=x, batch=4, tensors=("dO", "I", "W")) as cap:
        with cap.iteration(0):
            nn.functional.cross_entropy(model(x), y).backward()
    tr = open_trace(tmp_path / "t")
    assert [l.name for l in tr.workload.layers] == ["c1", "c2", "fc"]
    assert tr.tensor(0, "c1", "dO").shape == (4, 8, 1, 11)
    assert tr.tensor(0, "c1", "W").shape == (8, 4, 1, 5)


def test_padded_conv1d_pads_only_the_length():
    from sim.capture.torchnet import workload_from_model
    m = nn.Sequential(nn.Conv1d(2, 5, 3, padding=1, stride=2), nn.Flatten(), nn.Linear(5 * 4, 2))
    wl = workload_from_model(m, torch.zeros(1, 2, 8), "p")
    c = wl.layers[0]
    # L_out = (8 + 2*1 - 3) // 2 + 1 = 4 on a 1 x L map padded [0, 1]: the one row stays one row
    assert (c.h, c.w, c.p, c.q, c.r, c.s, c.pad) == (1, 8, 1, 4, 1, 3, (0, 1))
    assert wl.ops[0]["pad"] == [0, 1]
    g = lower(c, 7)   # strided: FWD M = N*L_out, N = C_out, K = C_in*k; scatter AGBP K = C_out
    assert (g["fwd"].m, g["fwd"].n, g["fwd"].k) == (7 * 4, 5, 2 * 3)
    assert (g["agbp"].m, g["agbp"].n, g["agbp"].k, g["agbp"].form) == (28, 6, 5, "scatter")


@pytest.mark.parametrize("mod, why", [(nn.Conv1d(2, 2, 3, dilation=2), "dilation"),
                                      (nn.Conv1d(2, 2, 3, padding="same"), "padding"),
                                      (nn.ConvTranspose2d(2, 2, 3, stride=2, output_padding=1),
                                       "output_padding"),
                                      (nn.Conv2d(2, 2, 3, stride=(1, 2)), "one stride")])
def test_what_the_schema_cannot_hold_is_refused_with_the_cause(mod, why):
    from sim.capture.torchnet import workload_from_model
    from sim.errors import CaptureError
    x = torch.zeros(1, 2, 8) if isinstance(mod, nn.Conv1d) else torch.zeros(1, 2, 8, 8)
    with pytest.raises(CaptureError, match=why):
        workload_from_model(nn.Sequential(mod), x, "p")


def test_deconv_capture_geometry_and_gemms():
    from sim.capture.torchnet import workload_from_model
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # nothing is left out
        wl = workload_from_model(Deconv(), torch.zeros(2, 3, 8, 8), "dc")
    up = wl.layer("up")
    assert wl.ops[1]["transposed"] is True and up.relu and not up.bias
    # H_out = (8 - 1) * 2 - 2 * 1 + 4 = 16; FWD is the reverse conv's strided (scatter) AGBP:
    # M = N*H_in*W_in = 2*64, N = C_out*R*S = 6*16, K = C_in = 4
    assert (up.c_in, up.h, up.c_out, up.p, up.q) == (4, 8, 6, 16, 16)
    g = lower(up, 2)
    assert (g["fwd"].m, g["fwd"].n, g["fwd"].k, g["fwd"].form) == (128, 96, 4, "scatter")
    assert (g["agbp"].m, g["agbp"].n, g["agbp"].k) == (128, 4, 96)
    assert (g["wgc"].m, g["wgc"].n, g["wgc"].k) == (4, 96, 128)
    assert wl.layer("fc").c_in == 6 * 16 * 16


def test_deconv_trace_and_replay_on_a_gpu_and_a_cpu(tmp_path, capsys):
    import json

    from sim.capture.hooks import Capture
    from sim.cli import main
    from sim.traces.format import open_trace
    model = Deconv()
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 2])
    with Capture(model, tmp_path / "t", example_input=x, batch=2, tensors=("dO", "W")) as cap:
        with cap.iteration(0):
            nn.functional.cross_entropy(model(x), y).backward()
    tr = open_trace(tmp_path / "t")
    assert tr.tensor(0, "up", "dO").shape == (2, 6, 16, 16)    # the deconv's output shape
    assert tr.tensor(0, "up", "W").shape == (4, 6, 4, 4)       # C_in x C_out x R x S
    capsys.readouterr()
    rc = main(["replay", str(tmp_path / "t"), "--hw", "a100-sxm4-40gb", "--hw", "rpi4b",
               "--method", "dbtd:p=0.9", "--method", "sdgp-mag:nm=2:4", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err
    rows = {r["layer"]: r for r in json.loads(out)["layers"]}
    dense, dbtd = rows["up"]["methods"]["dense"], rows["up"]["methods"]["dbtd:p=0.9,sigma=paper"]
    assert set(dense["seconds"]) == {"a100-sxm4-40gb"} and "transposed" in dense["not_run"]["rpi4b"]
    assert dense["seconds"]["a100-sxm4-40gb"]["fwd"] > 0
    assert "transposed" in dbtd["not_run"]["a100-sxm4-40gb"]    # DBTD sparsifies WGC too
    sdgp = rows["up"]["methods"]["sdgp-mag:nm=2:4"]                 # AGBP only: it runs
    assert 0 < sdgp["density"] <= 0.5 and sdgp["seconds"]["a100-sxm4-40gb"]["agbp"] > 0
    assert set(rows["c"]["methods"]["dense"]["seconds"]) == {"a100-sxm4-40gb", "rpi4b"}
    # the text report ends cleanly too: the deconv keeps every CPU row from a number
    assert main(["replay", str(tmp_path / "t"), "--hw", "a100-sxm4-40gb", "--hw", "rpi4b",
                 "--method", "dense"]) == 0
    out, err = capsys.readouterr()
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("a100-sxm4-40gb ", "rpi4b "))]
    assert [(r[0], r[-1]) for r in rows] == [("a100-sxm4-40gb", "ok"), ("rpi4b", "run")]
    assert "Traceback" not in err


def test_left_out_modules_are_named_in_one_warning():
    from sim.capture.torchnet import workload_from_model
    with pytest.warns(UserWarning) as rec:
        wl = workload_from_model(WithDeconv(), torch.zeros(1, 3, 8, 8), "d")
    msgs = [str(w.message) for w in rec if "left out" in str(w.message)]
    assert len(msgs) == 1 and "\n" not in msgs[0]
    assert "norm (LayerNorm)" in msgs[0] and "up (ConvTranspose2d)" not in msgs[0]
    assert [l.name for l in wl.layers] == ["c", "up", "fc"]


def test_capture_with_a_workload_names_unrecorded_gemm_modules(tmp_path):
    from sim.capture.hooks import Capture
    from sim.capture.torchnet import workload_from_model
    model = nn.Sequential(nn.Conv1d(4, 8, 5), nn.ConvTranspose1d(8, 8, 1), nn.Flatten(),
                          nn.Linear(8 * 21, 2))
    with pytest.warns(UserWarning, match="left out"):
        wl = workload_from_model(model, torch.zeros(1, 4, 25), "d")
    with pytest.warns(UserWarning) as rec:
        Capture(model, tmp_path / "t", wl, batch=1)
    msgs = [str(w.message) for w in rec if "not recorded" in str(w.message)]
    assert len(msgs) == 1 and "1 (ConvTranspose1d)" in msgs[0]


def test_api_capture_records_method_and_dataset(tmp_path):
    from sim.capture.hooks import Capture
    model = Net1d()
    x, y = torch.randn(2, 4, 25), torch.tensor([0, 1])
    with Capture(model, tmp_path / "t", example_input=x, batch=2, dataset="my-signals") as cap:
        with cap.iteration(0):
            nn.functional.cross_entropy(model(x), y).backward()
    from sim.traces.format import open_trace
    prov = open_trace(tmp_path / "t").provenance
    assert prov["method"]["id"] == "dense" and prov["dataset"]["name"] == "my-signals"


def test_folded_batchnorm_before_an_inplace_relu_is_not_reported():
    from sim.capture.torchnet import workload_from_model
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.Flatten(),
                      nn.Linear(4 * 6 * 6, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wl = workload_from_model(m, torch.zeros(1, 3, 8, 8), "f")
    assert wl.layers[0].bn and wl.layers[0].relu
