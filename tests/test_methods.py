"""Offline method kernels: each Numba kernel against its NumPy reference, and the methods' properties."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.cli import main
from sim.methods import apply_method, parse_method, stream_key
from sim.methods import approx as ap
from sim.methods import dbtd as db
from sim.methods import nm as nmm
from sim.methods import prunetrain as pt
from sim.methods import schedule as sch
from sim.methods.rng import uniform_at, uniform_np
from sim.workload import load_workload

from numba import njit


@njit(cache=True)
def _uniform_fill(key, n):
    out = np.empty(n, np.float32)
    for i in range(n):
        out[i] = uniform_at(key, i)
    return out


def heavy(shape, seed=0, zero_frac=0.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_t(3, size=shape) * 1e-3).astype(np.float32)
    if zero_frac:
        x[rng.random(shape) < zero_frac] = 0
    return x


# ---- random stream ----------------------------------------------------------------------------


def test_uniform_stream_numba_matches_numpy_and_is_uniform():
    key = stream_key(7, 3, 100)
    a = _uniform_fill(key, 200_000)
    b = uniform_np(key, np.arange(200_000))
    assert np.array_equal(a, b)
    assert abs(a.mean() - 0.5) < 0.005 and abs(a.var() - 1 / 12) < 0.002
    assert a.min() >= 0 and a.max() < 1
    assert not np.array_equal(a[:1000], uniform_np(stream_key(7, 3, 101), np.arange(1000)))


def test_uniform_stream_matches_torch():
    torch = pytest.importorskip("torch")
    from sim.methods.rng import uniform_torch
    key = stream_key(1, 2, 3)
    idx = np.array([0, 1, 2, 2**31, 2**33 + 5, 2**40 + 7], dtype=np.int64)
    assert np.array_equal(uniform_np(key, idx), uniform_torch(key, torch.from_numpy(idx)).numpy())


# ---- DBTD and top-k ---------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", ["paper", "unbiased", "meanabs"])
def test_dbtd_kernel_matches_reference(sigma):
    g = heavy((4, 8, 6, 6), zero_frac=0.3)
    res = db.dbtd(g, 0.9, key=11, sigma=sigma)
    tau = np.float32(res.extra["tau"])
    assert np.array_equal(res.pruned.reshape(-1), db.stochastic_prune_np(g, tau, 11))
    mean_abs = np.abs(g.astype(np.float64)).mean()
    factor = {"paper": math.sqrt(2 / math.pi), "unbiased": math.sqrt(math.pi / 2), "meanabs": 1.0}
    assert math.isclose(tau, 1.6448536 * factor[sigma] * mean_abs, rel_tol=1e-5)
    par = db.dbtd(g, 0.9, key=11, sigma=sigma, parallel=True)
    assert np.array_equal(par.pruned, res.pruned)
    # CSR holds exactly the pruned tensor
    csr = res.csr
    dense = np.zeros(csr.shape, np.float32)
    for r in range(csr.shape[0]):
        dense[r, csr.indices[csr.indptr[r]:csr.indptr[r + 1]]] = csr.data[csr.indptr[r]:csr.indptr[r + 1]]
    assert np.array_equal(dense.reshape(g.shape), res.pruned)
    assert res.density == pytest.approx(np.count_nonzero(res.pruned) / g.size)


def test_dbtd_values_are_kept_promoted_or_zero():
    g = heavy((2, 16, 8, 8))
    res = db.dbtd(g, 0.99, key=3)
    tau = np.float32(res.extra["tau"])
    out = res.pruned
    big = np.abs(g) >= tau
    assert np.array_equal(out[big], g[big])
    small = out[~big]
    assert np.all((small == 0) | (np.abs(small) == tau))
    assert np.all(np.sign(out[~big][small != 0]) == np.sign(g[~big][small != 0]))


def test_stochastic_pruning_is_unbiased():
    g = heavy((1, 4, 8, 8), seed=5)
    tau = db.dbtd_tau(np.abs(g).mean(), 0.9, "unbiased")
    trials = 4000
    acc = np.zeros(g.size, np.float64)
    sq = np.zeros(g.size, np.float64)
    flat = g.reshape(-1)
    for s in range(trials):
        out = np.empty_like(flat)
        db.stochastic_prune(flat, tau, stream_key(s, 0, 0), out)
        acc += out
        sq += out.astype(np.float64) ** 2
    mean = acc / trials
    # each sub-threshold estimate is tau*Bernoulli(|g|/tau): std <= tau/2 per draw
    tol = 5 * (float(tau) / 2) / math.sqrt(trials)
    assert np.max(np.abs(mean - flat)) < tol
    assert np.all(sq / trials <= float(tau) ** 2 + flat.astype(np.float64) ** 2 + 1e-12)


def test_dbtd_density_falls_with_p():
    g = heavy((4, 16, 8, 8), seed=2)
    d = [db.dbtd(g, p, key=1).density for p in (0.7, 0.8, 0.9, 0.99)]
    assert d == sorted(d, reverse=True) and d[0] > d[-1]


def test_dbtd_rejects_bad_rate():
    with pytest.raises(ValueError):
        db.dbtd_tau(1.0, 1.0)


@pytest.mark.parametrize("keep", [0.01, 0.2, 1.0])
def test_topk_matches_reference_with_ties(keep):
    g = heavy((3, 5, 4, 4), seed=9)
    g[0, 0, :2, :] = g[0, 0, 0, 0]  # ties
    res = db.topk(g, keep)
    assert np.array_equal(res.pruned, db.topk_np(g, res.extra["k"]))
    assert np.count_nonzero(res.pruned) <= res.extra["k"]


# ---- SDGP n:m ---------------------------------------------------------------------------------

NM = ["2:4", "1:4", "2:8", "4:8", "4:32", "16:32", "3:7", "1:2"]


@pytest.mark.parametrize("nm", NM)
@pytest.mark.parametrize("mode", ["random", "mag"])
def test_sdgp_kernel_matches_reference(nm, mode):
    x = heavy((3, 20, 5, 5), seed=4, zero_frac=0.2)
    x[0, :8, 0, 0] = x[0, 0, 0, 0]  # ties inside groups
    n, m = nmm.parse_nm(nm)
    res = nmm.sdgp(x, nm, mode, key=77)
    ref = nmm.nm_prune_np(x.reshape(3, 20, 25), n, m, mode, 77).reshape(x.shape)
    assert np.array_equal(res.pruned, ref)


@pytest.mark.parametrize("nm", NM)
def test_nm_structure_is_exact_and_metadata_round_trips(nm):
    x = heavy((2, 20, 3, 3), seed=1)
    n, m = nmm.parse_nm(nm)
    res = nmm.sdgp(x, nm, "mag", key=0)
    G = -(-20 // m)
    # at most n nonzeros per group of m channels at every (sample, position); exactly n when dense
    xt = np.zeros((2, G * m, 9), np.float32)
    xt[:, :20] = res.pruned.reshape(2, 20, 9)
    per_group = np.count_nonzero(xt.reshape(2, G, m, 9), axis=2)
    full = [g for g in range(G) if (g + 1) * m <= 20]
    assert np.all(per_group[:, full] == n)
    s = res.nm
    assert np.array_equal(nmm.pack_metadata_np(s.indices, s.bits_per_index), s.metadata)
    assert np.array_equal(nmm.unpack_metadata(s.metadata, G, n, s.bits_per_index), s.indices)
    assert np.all(np.diff(s.indices[:, full].astype(int), axis=2) > 0)  # ascending within a group
    cidx = np.minimum(np.arange(G)[None, :, None, None] * m + s.indices, 19)
    got = res.pruned.reshape(2, 20, 9)[np.arange(2)[:, None, None, None], cidx,
                                       np.arange(9)[None, None, None, :]]
    assert np.array_equal(got, s.values)


def test_2of4_metadata_is_four_bits_per_group():
    x = np.zeros((1, 8, 1, 1), np.float32)
    x[0, [1, 3, 4, 6], 0, 0] = 1.0  # groups keep (1, 3) and (0, 2)
    res = nmm.sdgp(x, "2:4", "mag", key=0)
    word = int(res.nm.metadata[0, 0, 0])
    assert word == (1 | 3 << 2) | ((0 | 2 << 2) << 4)
    assert res.nm.metadata.nbytes == 4


@pytest.mark.parametrize("rescale", ["sample-channel", "channel"])
def test_resmag_preserves_l1(rescale):
    x = heavy((4, 16, 6, 6), seed=8) * 1000  # O(1) values: the 1e-4 guard is then negligible
    res = nmm.sdgp(x, "2:8", "resmag", key=0, rescale=rescale)
    mag = nmm.nm_prune_np(x.reshape(4, 16, 36), 2, 8, "mag", 0)
    scale = nmm.resmag_scale_np(x.reshape(4, 16, 36), mag, rescale == "sample-channel")
    assert np.allclose(res.pruned.reshape(4, 16, 36), mag * scale[:, :, None] if scale.shape[0] == 4
                       else mag * scale[0][None, :, None], rtol=1e-6)
    l1 = np.abs(x).sum(axis=(2, 3)) if rescale == "sample-channel" else np.abs(x).sum(axis=(0, 2, 3))
    l1h = np.abs(res.pruned).sum(axis=(2, 3)) if rescale == "sample-channel" else \
        np.abs(res.pruned).sum(axis=(0, 2, 3))
    assert np.allclose(l1, l1h, rtol=1e-3)  # up to the 1e-4 guard in the denominator


@pytest.mark.parametrize("mode", ["random", "mag", "resmag"])
def test_sdgp_without_dense_output_has_the_same_structure(mode):
    x = heavy((3, 20, 5, 5), seed=12) * 1000
    a = nmm.sdgp(x, "2:8", mode, key=4)
    b = nmm.sdgp(x, "2:8", mode, key=4, dense_output=False)
    assert b.pruned is None and a.density == b.density and a.work == b.work
    assert np.array_equal(a.nm.values, b.nm.values) and np.array_equal(a.nm.metadata, b.nm.metadata)
    if mode == "resmag":
        assert np.array_equal(a.nm.channel_scale, b.nm.channel_scale)


def test_sdgp_nhwc_layout_equals_nchw():
    x = heavy((2, 12, 4, 4), seed=3)
    a = nmm.sdgp(x, "2:4", "mag", key=0).pruned
    b = nmm.sdgp(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "2:4", "mag", key=0,
                 layout="nhwc").pruned
    assert np.array_equal(a, b.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("bad", ["4:4", "0:4", "2:64", "x", "2-4"])
def test_parse_nm_rejects(bad):
    with pytest.raises(ValueError):
        nmm.parse_nm(bad)


# ---- approximate WGC --------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3])
def test_channel_picks_match_reference(k):
    g = heavy((3, 5, 4, 4), seed=6)
    g[0, 0] = 0
    g[1, 1, 0, :2] = g[1, 1].flat[np.argmax(np.abs(g[1, 1]))]  # ties
    res = ap.approx(g, k)
    idx, val = ap.channel_picks_np(g.reshape(3, 5, 16), k)
    assert np.array_equal(res.pick.index, idx)
    assert np.allclose(res.pick.value, val, rtol=1e-6, atol=1e-12)
    # the kept values sum to the channel's signed sum
    assert np.allclose(res.pick.value.sum(axis=2), g.reshape(3, 5, 16).sum(axis=2), rtol=1e-5,
                       atol=1e-9)


def _conv_wgrad_reference(I, dO, stride, pad, R, S):
    N, Cin, H, W = I.shape
    _, C, P, Q = dO.shape
    Ip = np.pad(I.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dw = np.zeros((C, Cin, R, S))
    for r in range(R):
        for s in range(S):
            patch = Ip[:, :, r:r + stride * P:stride, s:s + stride * Q:stride]  # N Cin P Q
            dw[:, :, r, s] = np.einsum("ncpq,nkpq->kc", patch, dO.astype(np.float64))
    return dw


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (1, 0)])
def test_approx_wgc_equals_convolution_of_one_hot_do(stride, pad):
    rng = np.random.default_rng(0)
    I = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    R = S = 3
    P = (7 + 2 * pad - R) // stride + 1
    dO = heavy((2, 4, P, P), seed=1)
    res = ap.approx(dO, 1)
    one_hot = ap.picks_to_dense(res.pick, dO.shape)
    assert np.count_nonzero(one_hot) <= 2 * 4
    dw = np.zeros((4, 3, R, S), np.float32)
    ap.approx_wgc(I, res.pick.index, res.pick.value, P, R, S, stride, pad, dw)
    assert np.allclose(dw, _conv_wgrad_reference(I, one_hot, stride, pad, R, S), rtol=1e-5, atol=1e-6)


def test_random_dw_scale():
    res = ap.random_dw((64, 32, 3, 3), batch=128, key=stream_key(0, 1, 2))
    assert res.pruned.shape == (64, 32, 3, 3)
    assert res.pruned.std() == pytest.approx(1 / 128, rel=0.05)
    assert abs(res.pruned.mean()) < 5 / 128 / math.sqrt(res.pruned.size)


# ---- schedules --------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [1, 2, 3])
def test_paper_schedules_touch_a_quarter(number):
    assert sch.coverage(sch.paper_schedule(number, 20)) == 0.25
    for n_conv in (19, 21, 53):  # resnet20 has 21 convs with projection shortcuts
        assert abs(sch.coverage(sch.paper_schedule(number, n_conv)) - 0.25) <= 1 / n_conv


def test_schedule_1_layers_and_cnn2():
    t = sch.paper_schedule(1, 9)
    assert [i for i in range(9) if sch.applies(t, i, 5)] == [1, 5]
    t2 = sch.paper_schedule(1, 2)
    assert [sch.applies(t2, 1, b) for b in range(4)] == [True, False, True, False]
    assert not any(sch.applies(t2, 0, b) for b in range(4))
    assert sch.from_rows(["0101", "1111"]).shape == (2, 4)
    with pytest.raises(ValueError):
        sch.from_rows(["01", "1"])


# ---- PruneTrain -------------------------------------------------------------------------------


def _weights(w, seed=0):
    rng = np.random.default_rng(seed)
    return {l.name: rng.standard_normal(l.tensor_shapes(1)["W"]).astype(np.float32) for l in w.layers}


def test_channel_union_on_residual_node():
    w = load_workload("resnet20")
    weights = _weights(w)
    res_layers = [l for l in w.layers if l.residual_node and l.residual_node == w.convs[0].residual_node]
    assert len(res_layers) >= 3  # stem + the stage's block outputs share one node
    plan = pt.channel_plan(w, weights)
    assert all(plan.layer_c_out[l.name] == l.c_out for l in w.layers)
    # zero output channel 5 in only one writer of the residual node: the union keeps it
    weights[res_layers[1].name][5] = 0
    assert pt.channel_plan(w, weights).space_keep[res_layers[0].out_space][5]
    # zero it in every writer and every reader: the node loses it everywhere
    space = res_layers[0].out_space
    for l in w.layers:
        if l.out_space == space:
            weights[l.name][5] = 0
        if l.in_space == space and l.op == "conv":
            weights[l.name][:, 5] = 0
    plan = pt.channel_plan(w, weights)
    assert not plan.space_keep[space][5]
    assert all(plan.layer_c_out[l.name] == l.c_out - 1 for l in w.layers if l.out_space == space)
    assert plan.density(w) < 1.0


def test_plain_layers_remove_only_the_intersection():
    w = load_workload("vgg11-cifar")
    weights = _weights(w)
    a, b = w.convs[0], w.convs[1]
    weights[a.name][3] = 0                      # producer's output channel 3 sparse
    assert pt.channel_plan(w, weights).layer_c_in[b.name] == b.c_in  # consumer still uses it
    weights[b.name][:, 3] = 0                   # and now the consumer's input channel 3 too
    plan = pt.channel_plan(w, weights)
    assert plan.layer_c_out[a.name] == a.c_out - 1 and plan.layer_c_in[b.name] == b.c_in - 1


def test_lasso_lambda_from_penalty_ratio():
    lam = pt.lasso_lambda(0.2, first_loss=2.3, group_norm=150.0)
    assert lam * 150.0 / (2.3 + lam * 150.0) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        pt.lasso_lambda(1.2, 1.0, 1.0)


# ---- registry and CLI -------------------------------------------------------------------------


def test_parse_method_defaults_and_errors():
    s = parse_method("sdgp-resmag:nm=2:8")
    assert s.get("nm") == "2:8" and s.get("rescale") == "sample-channel"
    assert parse_method("dbtd", {"p": "0.9"}).get("p") == 0.9
    for bad in ("nope", "dbtd:p=2", "dbtd:q=1", "sdgp-mag:nm=5:4", "dbtd:p"):
        with pytest.raises(ValueError):
            parse_method(bad)


def test_sdgp_skips_stem_and_fc():
    w = load_workload("resnet20")
    spec = parse_method("sdgp-mag")
    stem, fc = w.layers[0], w.layers[-1]
    g = heavy(stem.tensor_shapes(2)["dO"])
    assert apply_method(spec, stem, g, key=0, batch=2).structure == "dense"
    assert apply_method(spec, fc, heavy(fc.tensor_shapes(2)["dO"]), key=0, batch=2).structure == "dense"
    mid = w.layers[3]
    assert apply_method(spec, mid, heavy(mid.tensor_shapes(2)["dO"]), key=0, batch=2).structure == "nm"


def test_prune_cli_round_trip(tmp_path, capsys):
    x = heavy((2, 8, 4, 4))
    np.save(tmp_path / "g.npy", x)
    rc = main(["prune", str(tmp_path / "g.npy"), str(tmp_path / "o.npy"), "--method", "sdgp-mag",
               "--nm", "2:4", "--json"])
    assert rc == 0
    out = np.load(tmp_path / "o.npy")
    assert np.array_equal(out, nmm.sdgp(x, "2:4", "mag", key=0).pruned)
    assert '"density": 0.5' in capsys.readouterr().out


@pytest.mark.parametrize("case", ["nan", "pickle", "ndim", "method", "missing", "int"])
def test_prune_cli_bad_input(tmp_path, capsys, case):
    f = tmp_path / "g.npy"
    method = "dbtd"
    if case == "nan":
        x = heavy((2, 4, 3, 3))
        x[1, 2, 0, 0] = np.nan
        np.save(f, x)
    elif case == "pickle":
        np.save(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif case == "ndim":
        np.save(f, np.zeros((2, 3, 4), np.float32))
    elif case == "method":
        np.save(f, heavy((2, 4, 3, 3)))
        method = "dbtd:p=7"
    elif case == "int":
        np.save(f, np.ones((2, 4, 3, 3), np.int32))
    rc = main(["prune", str(f), str(tmp_path / "o.npy"), "--method", method])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0]
    assert not (tmp_path / "o.npy").exists()


def test_dbtd_on_a_relu_masked_do_takes_tau_from_the_nonzeros():
    g = heavy((2, 8, 6, 6), seed=21, zero_frac=0.8)
    res = db.dbtd(g, 0.99, key=2, relu_masked=True)
    nz = np.abs(g[g != 0].astype(np.float64)).mean()
    assert res.extra["tau"] == pytest.approx(float(db.dbtd_tau(nz, 0.99)), rel=1e-6)
    assert np.all(res.pruned[g == 0] == 0)
    plain = db.dbtd(g, 0.99, key=2)
    assert res.density < plain.density    # the masked zeros no longer drag tau down
    # apply_method picks it for Conv-ReLU layers (DBTD targets their dI), not for Conv-BN ones
    cnn2 = load_workload("cnn2").convs[1]
    r20 = load_workload("resnet20").convs[1]
    spec = parse_method("dbtd:p=0.99")
    assert "tau_from" in apply_method(spec, cnn2, g, key=2, batch=2).extra
    assert "tau_from" not in apply_method(spec, r20, g[:, :, :, :], key=2, batch=2).extra


@pytest.mark.parametrize("offset", [0, 2**32 - 50, 2**32 + 7])
def test_prune_block_draws_by_global_index_across_the_2_32_boundary(offset):
    """The per-block hashing shortcut gives exactly uniform_at's draws, also for a block that
    straddles index 2^32 (tensors of more than 4G elements)."""
    g = heavy((1, 1, 10, 10), seed=3).reshape(-1)
    tau = np.float32(np.abs(g).mean() * 2)
    out = np.empty_like(g)
    db._prune_block(g, tau, 99, out, offset)
    r = uniform_np(99, offset + np.arange(g.size, dtype=np.uint64))
    a = np.abs(g)
    ref = np.where(a >= tau, g, np.where(a > r * tau, np.sign(g) * tau, 0)).astype(np.float32)
    assert np.array_equal(out, ref)


# ---- DBTD / top-k and FC layers (fc option) -----------------------------------------------------


@pytest.mark.parametrize("method", ["dbtd:p=0.9", "topk:keep=0.05"])
def test_dbtd_topk_leave_fc_dense_unless_fc_prune(method):
    wl = load_workload("resnet20")
    fc = [l for l in wl.layers if l.op == "fc"][0]
    conv = wl.convs[1]
    g = heavy((4, fc.c_out), seed=3)
    dense = apply_method(parse_method(method), fc, g, key=1, batch=4)
    assert dense.structure == "dense" and dense.density == 1.0
    pruned = apply_method(parse_method(method + ",fc=prune"), fc, g, key=1, batch=4)
    assert pruned.structure == "csr" and pruned.density < 0.9
    # conv layers are pruned either way, identically
    gc = heavy((2, conv.c_out, 8, 8), seed=4)
    a = apply_method(parse_method(method), conv, gc, key=1, batch=2)
    b = apply_method(parse_method(method + ",fc=prune"), conv, gc, key=1, batch=2)
    np.testing.assert_array_equal(a.pruned, b.pruned)
    # the default keeps the label it always had; fc=prune is named
    assert "fc" not in parse_method(method).label
    assert "fc=prune" in parse_method(method + ",fc=prune").label
    with pytest.raises(ValueError, match="fc"):
        parse_method(method + ",fc=sometimes")


@pytest.mark.parametrize("kind", ["normal", "ties", "mostly-zero"])
def test_topk_radix_select_is_numpys_partition(kind):
    # the k-th largest |g| and the count above it, against np.partition, with ties and zeros
    rng = np.random.default_rng(7)
    for n in (2, 9, 1000, 70_001):
        x = rng.standard_normal(n).astype(np.float32)
        if kind == "ties":
            x = np.round(x * 4).astype(np.float32)
        elif kind == "mostly-zero":
            x[rng.random(n) < 0.9] = 0
        a = np.abs(x)
        for k in sorted({1, max(1, n // 100), max(1, n // 2), n - 1}):
            kth, above = db._kth_largest(a, k)
            want = np.partition(a, n - k)[n - k]
            assert kth == want and above == int((a > want).sum()), (n, k)
            idx = db._topk_mask(a, k)
            ref = np.nonzero(db.topk_np(x, k))[0]
            assert idx.size == k and np.array_equal(idx[x[idx] != 0], ref), (n, k)


def test_topk_csr_from_kept_indices_is_the_dense_scan():
    # the CSR built from the kept indices equals to_csr of the pruned tensor (zeros among the kept
    # left out), for NCHW and N x F shapes
    for shape, keep in (((3, 5, 4, 4), 0.1), ((2, 3, 7, 5), 0.9), ((6, 10), 0.3)):
        g = heavy(shape, seed=4)
        g.reshape(-1)[::3] = 0
        res = db.topk(g, keep)
        ref = db.to_csr(res.pruned)
        assert res.csr.shape == ref.shape
        for a, b in ((res.csr.indptr, ref.indptr), (res.csr.indices, ref.indices),
                     (res.csr.data, ref.data)):
            assert a.dtype == b.dtype and np.array_equal(a, b)
