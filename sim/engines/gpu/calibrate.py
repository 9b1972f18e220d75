"""`prunesim calibrate --gpu`: measure an NVIDIA GPU, fit the GPU model's free parameters, check.

    prunesim calibrate --gpu [--hw BASE] [--measurements-out FILE] [--out HW.yaml]
    prunesim calibrate --gpu --from-measurements FILE [--hw BASE] [--out HW.yaml]
    prunesim calibrate --gpu --check --hw HW.yaml [--from-measurements FILE] [--json]

Measuring (PyTorch with CUDA, the optional extra) times a short plan of microbenchmarks with CUDA
events: dense GEMMs of several shapes and dtypes, 2:4 GEMMs through
`torch.sparse.to_sparse_semi_structured` (the ResNet-18 AGBP shapes bench/gpu_measure.py timed),
conv fwd/dgrad/wgrad, and a device-memory copy. They go to a measurement file (JSON,
schema-versioned: device, driver, torch version, entries {kind, shape, dtype, seconds, role}).

Fitting changes only the free parameters of the GPU model (FIT_TABLE, one row per hwconfig field:
which measurement kinds determine it and in what range), one at a time by golden-section search on
the log error of the model's prediction over the entries whose role is "fit", twice round the
table (the copy fixes DRAM bandwidth, which the GEMMs' memory-bound parts then see). The hwconfig
written has `base:` the bundled config and only the fitted fields, each with the source
"calibrated on <GPU> by prunesim calibrate --gpu: ...". Entries whose role is "check" are never
fitted: --check prints the model's error on each of them.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from sim.errors import ConfigError

SCHEMA = "prunesim-gpu-measurements"
VERSION = 1
# kind -> shape fields (all positive integers but conv stride >= 1, pad >= 0)
SHAPES = {"gemm": ("m", "n", "k"), "gemm-2:4": ("m", "n", "k"),
          "conv-fwd": ("N", "C_in", "C_out", "H", "W", "R", "S", "stride", "pad"),
          "conv-dgrad": ("N", "C_in", "C_out", "H", "W", "R", "S", "stride", "pad"),
          "conv-wgrad": ("N", "C_in", "C_out", "H", "W", "R", "S", "stride", "pad"),
          "copy": ("bytes",)}
CONV_PHASE = {"conv-fwd": "fwd", "conv-dgrad": "agbp", "conv-wgrad": "wgc"}
DTYPES = ("fp16", "bf16", "tf32", "fp32")
ROLES = ("fit", "check")
MARK = "by prunesim calibrate --gpu"
BASES = (("a100", "80gb", "a100-sxm4-80gb"), ("a100", "", "a100-sxm4-40gb"),
         ("h100", "", "h100-sxm5-80gb"), ("v100", "", "v100-sxm2"))


@dataclass(frozen=True)
class FitParam:
    """One free parameter: a hwconfig field, the unit it is written in, the measurement kinds that
    determine it, the search range as factors of the base value, and what it stands for."""

    field: str
    unit: str
    scale: float                 # SI value per unit
    kinds: tuple[str, ...]
    span: tuple[float, float]
    means: str


# Table-driven: a new free parameter of the GPU model (prologue/epilogue costs,
# sparse smem/metadata limits) is one more row naming the kinds that pin it down.
FIT_TABLE: tuple[FitParam, ...] = (
    FitParam("hbm_bandwidth", "GB/s", 1e9, ("copy",), (0.2, 1.2),
             "sustained device-memory bandwidth of a copy"),
    FitParam("sustained_clock", "MHz", 1e6, ("gemm", "conv-fwd", "conv-dgrad", "conv-wgrad"),
             (0.3, 1.3), "the clock the tensor cores sustain under load, power-limited (dense "
             "GEMMs and convs; the base's boost clock where it declares none)"),
)


_STARTS_FROM = {"sustained_clock": "clock"}


# ---- the measurement file ------------------------------------------------------------------------


def _finite_pos(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def check_entry(e, i: int, path: str) -> dict:
    """One entry validated; errors name it (entries[i] with its kind and shape)."""
    where = f"entries[{i}]"
    if not isinstance(e, dict):
        raise ConfigError(path, where, "expected {kind, shape, dtype, seconds, role}")
    kind = e.get("kind")
    if kind not in SHAPES:
        raise ConfigError(path, f"{where}.kind", f"expected one of {', '.join(SHAPES)}, got "
                          f"{kind!r}")
    shape = e.get("shape")
    where = f"{where} ({kind} {shape})"
    n = len(SHAPES[kind])
    if not isinstance(shape, list) or len(shape) != n or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape) \
            or any(x == 0 for x in (shape[:-1] if kind.startswith("conv") else shape)):
        raise ConfigError(path, f"{where}.shape", f"expected {n} positive integers "
                          f"({','.join(SHAPES[kind])})")
    if e.get("dtype") not in DTYPES:
        raise ConfigError(path, f"{where}.dtype", f"expected one of {', '.join(DTYPES)}")
    if "seconds" not in e:
        raise ConfigError(path, f"{where}.seconds", "missing")
    if not _finite_pos(e["seconds"]):
        raise ConfigError(path, f"{where}.seconds", f"must be a finite time > 0, got "
                          f"{e['seconds']!r}")
    if e.get("role", "fit") not in ROLES:
        raise ConfigError(path, f"{where}.role", f"expected fit or check, got {e.get('role')!r}")
    return {"kind": kind, "shape": list(shape), "dtype": e["dtype"], "seconds": float(e["seconds"]),
            "role": e.get("role", "fit")}


def load_measurements(path: str | Path) -> dict:
    """A measurement file, validated: every entry complete and finite (refused naming the entry)."""
    p = str(path)
    from sim.limits import BUDGETS, read_input_text
    text = read_input_text(path, error=ConfigError, what="measurement file",
                           max_bytes=BUDGETS["json_bytes"].limit)
    try:
        doc = json.loads(text, parse_constant=lambda c: float(c))  # NaN/Infinity: refused per entry
    except ValueError as e:
        raise ConfigError(p, None, f"not a JSON measurement file: {str(e).splitlines()[0]}") \
            from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ConfigError(p, "schema", f"expected {SCHEMA!r}")
    if doc.get("version") != VERSION:
        raise ConfigError(p, "version", f"this prunesim reads version {VERSION}, got "
                          f"{doc.get('version')!r}")
    if not isinstance(doc.get("device"), str) or not doc["device"].strip():
        raise ConfigError(p, "device", "missing: the GPU's name")
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(p, "entries", "missing or empty")
    doc["entries"] = [check_entry(e, i, p) for i, e in enumerate(entries)]
    return doc


# ---- the model's prediction of one entry -------------------------------------------------------


def predict(hw, e: dict) -> float:
    """Seconds the GPU model gives for one measurement entry on hwconfig `hw`."""
    from sim.engines.gpu.engine import GpuEngine
    from sim.engines.gpu.stream import stream_kernel
    kind, shape, dtype = e["kind"], e["shape"], e["dtype"]
    if kind == "copy":
        return stream_kernel(hw, "copy", read_bytes=shape[0], write_bytes=shape[0]).seconds
    eng = GpuEngine(hw)
    if kind in ("gemm", "gemm-2:4"):
        m, n, k = shape
        return sum(r.seconds for r in eng.gemm(m, n, k, dtype=dtype,
                                               sparse="2:4" if kind == "gemm-2:4" else None))
    from sim.driver import phase_kernels
    from sim.engines.cli import conv_workload
    _, (layer,), nb = conv_workload(",".join(str(x) for x in shape))
    ph = CONV_PHASE[kind]
    ks = phase_kernels(eng, layer, nb, None, phases=(ph,), dtype=dtype)
    return sum(k.seconds for k in ks[ph])


def _log_err(hw, entries) -> float:
    return sum(math.log(predict(hw, e) / e["seconds"]) ** 2 for e in entries)


def _variant(base, values: dict):
    from sim.hwconfig import with_overrides
    return with_overrides(base, {f: f"{v / p.scale!r} {p.unit}" for f, (v, p) in values.items()})


def _golden(f, lo: float, hi: float, tol: float = 1e-5) -> float:
    """Minimum of f on [lo, hi] (log-space factor) by golden-section search."""
    r = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - r * (b - a), a + r * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - r * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + r * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit(base, entries: list[dict], rounds: int = 2) -> dict:
    """{field: (SI value, FitParam, entries used)} for the FIT_TABLE rows with "fit" entries."""
    fit_entries = [e for e in entries if e["role"] == "fit"]
    values: dict = {}
    used: dict = {}
    for _ in range(rounds):
        for p in FIT_TABLE:
            es = [e for e in fit_entries if e["kind"] in p.kinds]
            if not es:
                continue
            # a field the base leaves out starts from the one it defaults to (sustained_clock: clock)
            v0 = base.value(p.field) or base.value(_STARTS_FROM.get(p.field, p.field))

            def cost(x, p=p, es=es, v0=v0):
                return _log_err(_variant(base, {**values, p.field: (v0 * math.exp(x), p)}), es)
            x = _golden(cost, math.log(p.span[0]), math.log(p.span[1]))
            values[p.field] = (v0 * math.exp(x), p)
            used[p.field] = es
    return {f: (v, p, used[f]) for f, (v, p) in values.items()}


def held_out(hw, entries: list[dict]) -> list[dict]:
    """The model's error on every "check" entry (never used in the fit)."""
    out = []
    for e in entries:
        if e["role"] != "check":
            continue
        m = predict(hw, e)
        out.append({**e, "modeled_s": m, "error": m / e["seconds"] - 1})
    return out


# ---- the hwconfig --------------------------------------------------------------------------------


def slug(device: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:48] or "gpu"


def base_for(device: str) -> str:
    """The bundled hwconfig a device name most likely is (the --hw default)."""
    d = device.lower()
    for chip, mem, name in BASES:
        if chip in d and mem in d.replace(" ", ""):
            return name
    raise ConfigError(None, "--hw", f"no bundled hwconfig known for {device!r}: name the base "
                      "config with --hw")


def hwconfig_text(base_name: str, device: str, fitted: dict) -> str:
    """A hwconfig `base:` the bundled one, overriding only the fitted fields (sealed)."""
    from sim.hwconfig import calibrated_entry, calibration_seal
    lines = ["schema: 1", f"name: {json.dumps(base_name + '-' + slug(device))}", "kind: gpu",
             "description: " + json.dumps(f"{device}: {base_name} with its free parameters "
                                          f"calibrated on {device} {MARK}"),
             f"base: {base_name}", "params:"]
    for f, (v, p, es) in fitted.items():
        src = (f"calibrated on {device} {MARK}: {p.means}, fitted to {len(es)} measured "
               f"{'/'.join(sorted({e['kind'] for e in es}))} entries (log least squares)")
        lines.append(calibrated_entry(f, f"{v / p.scale:.6g} {p.unit}", src))
    body = "\n".join(lines) + "\n"
    return body + calibration_seal(body)


# ---- measuring (needs PyTorch with CUDA) -------------------------------------------------------


# (kind, shape, dtype, role): fit shapes and held-out shapes are different sizes and aspect ratios
PLAN: tuple[tuple[str, tuple, str, str], ...] = (
    ("copy", (1 << 30,), "fp16", "fit"), ("copy", (1 << 28,), "fp16", "fit"),
    ("copy", (1 << 29,), "fp16", "check"),
    ("gemm", (8192, 8192, 8192), "fp16", "fit"), ("gemm", (4096, 4096, 4096), "fp16", "fit"),
    ("gemm", (16384, 1024, 4096), "bf16", "fit"), ("gemm", (4096, 4096, 4096), "tf32", "fit"),
    ("gemm", (6144, 6144, 6144), "fp16", "check"), ("gemm", (3072, 10240, 3072), "bf16", "check"),
    ("gemm", (2048, 8192, 2048), "tf32", "check"),
    # ResNet-18 ImageNet b256 AGBP shapes (M = N*P*Q, N = C_in*R*S, K = C_out), as SDGP prunes dO
    ("gemm-2:4", (200704, 1152, 256), "fp16", "check"), ("gemm-2:4", (50176, 2304, 512), "fp16",
                                                           "check"),
    ("gemm-2:4", (4096, 4096, 4096), "fp16", "check"),
    # their dense partners (the measured 2:4 speedup) and two more sparse shapes
    ("gemm", (200704, 1152, 256), "fp16", "check"), ("gemm", (50176, 2304, 512), "fp16", "check"),
    ("gemm-2:4", (8192, 8192, 8192), "fp16", "check"), ("gemm-2:4", (6144, 6144, 6144), "fp16",
                                                         "check"),
    ("conv-fwd", (256, 128, 128, 28, 28, 3, 3, 1, 1), "fp16", "fit"),
    ("conv-dgrad", (256, 128, 128, 28, 28, 3, 3, 1, 1), "fp16", "fit"),
    ("conv-wgrad", (256, 128, 128, 28, 28, 3, 3, 1, 1), "fp16", "fit"),
    ("conv-fwd", (256, 256, 256, 14, 14, 3, 3, 1, 1), "fp16", "check"),
    ("conv-dgrad", (256, 256, 256, 14, 14, 3, 3, 1, 1), "fp16", "check"),
    ("conv-wgrad", (256, 256, 256, 14, 14, 3, 3, 1, 1), "fp16", "check"),
)


def _torch_cuda():
    """torch with a CUDA device, or the one-line refusal (exit 2)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise ConfigError(None, "--gpu", "no NVIDIA GPU here (PyTorch with CUDA finds none): "
                          "record measurements on a GPU machine and fit them with "
                          "--from-measurements FILE")
    return torch


def _timed(torch, fn, repeat: int, warm: int = 3) -> float:
    """Median seconds of one call by CUDA events, after `warm` calls."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(repeat):
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


def kernel_times(torch, fn, repeat: int) -> dict[str, float]:
    """{kernel name: device seconds per call} of the kernels fn launches (torch.profiler), host
    gaps left out."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.events():
        if "CUDA" in str(getattr(ev, "device_type", "")):
            t = getattr(ev, "device_time", None) or getattr(ev, "cuda_time", 0.0)
            out[ev.name[:160]] = out.get(ev.name[:160], 0.0) + t / 1e6 / repeat
    return out


def _kernel_seconds(torch, fn, repeat: int) -> float:
    total = sum(kernel_times(torch, fn, repeat).values())
    if not total > 0:
        raise RuntimeError("the profiler saw no kernel")
    return total


def _bench(torch, kind: str, shape: tuple, dtype: str, repeat: int) -> float:
    dev = "cuda"
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(dtype, torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    if kind == "copy":
        src = torch.empty(shape[0] // 2, dtype=torch.float16, device=dev)
        dst = torch.empty_like(src)
        return _timed(torch, lambda: dst.copy_(src), repeat)
    if kind in ("gemm", "gemm-2:4"):
        m, n, k = shape
        a = torch.randn(m, k, device=dev, dtype=tdt)
        b = torch.randn(k, n, device=dev, dtype=tdt)
        if kind == "gemm-2:4":
            # cuSPARSELt directly, timed by the device time of its kernels: PyTorch's call sets up
            # a cuSPARSELt plan on the host each time (~0.7 ms on an H100 box, 2026-11-23), during
            # which the GPU idles, so event timing measures the host, not the kernel
            packed = torch._cslt_compress(a * torch.tensor([1, 1, 0, 0], device=dev,
                                                           dtype=tdt).repeat(m, k // 4))
            return _kernel_seconds(torch, lambda: torch._cslt_sparse_mm(packed, b), repeat)
        return _timed(torch, lambda: torch.mm(a, b), repeat)
    nb, ci, co, h, w, r, s, st, pd = shape
    torch.backends.cudnn.benchmark = True
    # NHWC (channels_last), the layout cuDNN's tensor-core kernels run in: NCHW tensors would add
    # two layout transposes per call that the conv engine does not model
    cl = torch.channels_last
    x = torch.randn(nb, ci, h, w, device=dev, dtype=tdt).to(memory_format=cl)
    wt = torch.randn(co, ci, r, s, device=dev, dtype=tdt).to(memory_format=cl)
    y = torch.nn.functional.conv2d(x, wt, stride=st, padding=pd)
    g = torch.randn_like(y).to(memory_format=cl)
    # the backward phases through the op autograd itself calls (torch.nn.grad.conv2d_input passes
    # an expanded, non-channels_last input and pays layout copies a training step does not)
    def bwd(mask):
        return torch.ops.aten.convolution_backward(g, x, wt, None, [st, st], [pd, pd], [1, 1],
                                                   False, [0, 0], 1, mask)
    fn = {"conv-fwd": lambda: torch.nn.functional.conv2d(x, wt, stride=st, padding=pd),
          "conv-dgrad": lambda: bwd([True, False, False]),
          "conv-wgrad": lambda: bwd([False, True, False])}[kind]
    return _timed(torch, fn, repeat)


def measure(quick: bool = False, log=print) -> dict:
    """Run PLAN on this machine's GPU; a kernel the GPU or PyTorch lacks is left out, logged."""
    import platform
    torch = _torch_cuda()
    props = torch.cuda.get_device_properties(0)
    doc = {"schema": SCHEMA, "version": VERSION, "device": torch.cuda.get_device_name(0),
           "driver": _driver(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "host": platform.node(), "sm_count": props.multi_processor_count,
           "note": ("measured by prunesim calibrate --gpu: CUDA events, median of repeats; "
                    "gemm-2:4 = device time of the cuSPARSELt kernels (torch.profiler), mean; "
                    "convs in NHWC (channels_last)"),
           "entries": []}
    for kind, shape, dtype, role in PLAN:
        try:
            sec = _bench(torch, kind, shape, dtype, 5 if quick else 20)
        except (RuntimeError, NotImplementedError, ImportError) as e:
            log(f"skipped {kind} {list(shape)} {dtype}: {str(e).splitlines()[0][:120]}")
            continue
        doc["entries"].append({"kind": kind, "shape": list(shape), "dtype": dtype,
                               "seconds": sec, "role": role})
        log(f"{kind:10} {str(list(shape)):42} {dtype:5} {sec * 1e3:9.3f} ms")
    return doc


def _driver() -> str:
    import subprocess
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20, check=False)
        return r.stdout.strip().splitlines()[0] if r.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ---- synthetic fixtures (tests): measurements generated from the model itself ------------------


def synthesize(base_name: str, truth: dict[str, str], plan=PLAN) -> dict:
    """A measurement file the model itself generates on `base_name` with `truth` overrides
    ({field: '1200 MHz'}): a test fixture, labeled as such, never a measurement."""
    from sim.hwconfig import load_hwconfig, with_overrides
    hw = with_overrides(load_hwconfig(base_name), truth)
    return {"schema": SCHEMA, "version": VERSION, "device": f"synthetic ({base_name} model)",
            "driver": "none", "torch": "none",
            "note": (f"SYNTHETIC test fixture, not a measurement: every 'seconds' is the prunesim "
                     f"GPU model's prediction on {base_name} with {truth} "
                     "(sim.engines.gpu.calibrate.synthesize); the fit must recover these values"),
            "truth": truth, "base": base_name,
            "entries": [{"kind": k, "shape": list(s), "dtype": d,
                         "seconds": predict(hw, {"kind": k, "shape": list(s), "dtype": d}),
                         "role": r} for k, s, d, r in plan]}


# ---- the command ---------------------------------------------------------------------------------


def _write_json(path: Path, doc: dict, force: bool) -> None:
    from sim.outputs import check_output, write_atomic
    out = check_output(path, force=force, field="--measurements-out")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, lambda tmp: tmp.write_text(json.dumps(doc, indent=1) + "\n"))


def _print_check(rows: list[dict], hw_name: str, device: str) -> None:
    print(f"held-out entries (not used in the fit): {hw_name} vs {device}")
    print(f"{'kind':10} {'shape':42} {'dtype':5} {'measured ms':>12} {'model ms':>10} {'error':>8}")
    for r in rows:
        print(f"{r['kind']:10} {str(r['shape']):42} {r['dtype']:5} {r['seconds'] * 1e3:12.3f} "
              f"{r['modeled_s'] * 1e3:10.3f} {r['error']:+8.1%}")
    if rows:
        print(f"median |error| {statistics.median(abs(r['error']) for r in rows):.1%} over "
              f"{len(rows)} held-out entries")


def cmd_calibrate_gpu(args) -> int:
    """`prunesim calibrate --gpu ...` (see the module docstring)."""
    import sys
    from sim.engines.cpu.calibrate import check_calibrate_output
    from sim.hwconfig import load_hwconfig
    log = (lambda s: print(s, file=sys.stderr)) if args.json else print
    src = getattr(args, "from_measurements", None)
    if args.check:
        for opt, given in (("--out", args.out is not None), ("--force", args.force),
                           ("--measurements-out", args.measurements_out is not None)):
            if given:
                raise ConfigError(None, opt, "--check compares; it writes nothing (leave it out)")
        if args.hw is None:
            raise ConfigError(None, "--hw", "--check needs the hwconfig to check (--hw)")
    if src is not None and args.measurements_out is not None:
        raise ConfigError(None, "--measurements-out", "--from-measurements reads a recorded "
                          "file; nothing is measured to write (leave it out)")
    if src is not None and args.quick:
        raise ConfigError(None, "--quick", "--from-measurements measures nothing (leave it out)")
    if src is not None:
        doc = load_measurements(src)
    else:
        doc = measure(args.quick, log)
        mout = Path(args.measurements_out or f"out/gpu-measurements-{slug(doc['device'])}.json")
        _write_json(mout, doc, args.force)
        log(f"wrote {mout}")
        doc = load_measurements(mout)
    if args.check:
        hw = load_hwconfig(args.hw)
        rows = held_out(hw, doc["entries"])
        if not rows:
            raise ConfigError(src, "entries", "no held-out (role: check) entries to compare")
        if args.json:
            print(json.dumps({"hw": hw.name, "device": doc["device"], "held_out": rows}, indent=1))
        else:
            _print_check(rows, hw.name, doc["device"])
        return 0
    base_name = args.hw or base_for(doc["device"])
    base = load_hwconfig(base_name)
    out = check_calibrate_output(args.out or f"hwconfigs/gpu-{slug(doc['device'])}.yaml",
                                 args.force)
    fitted = fit(base, doc["entries"])
    if not fitted:
        raise ConfigError(src, "entries", "no fit entries for any free parameter "
                          f"({', '.join(p.field for p in FIT_TABLE)})")
    from sim.outputs import write_atomic
    out.parent.mkdir(parents=True, exist_ok=True)
    text = hwconfig_text(base.name if args.hw is None else args.hw, doc["device"], fitted)
    write_atomic(out, lambda tmp: tmp.write_text(text))
    res = {"out": str(out), "fitted": {f: v for f, (v, _, _) in fitted.items()},
           "held_out": held_out(load_hwconfig(out), doc["entries"])}
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for f, (v, p, es) in fitted.items():
            print(f"{f}: {v / p.scale:.6g} {p.unit} (base {base.value(f) / p.scale:.6g}; "
                  f"{len(es)} entries)")
        _print_check(res["held_out"], out.name, doc["device"])
        print(f"wrote {out}")
    return 0


def cmd_calibrate(args) -> int:
    """`prunesim calibrate`: --gpu here, else the CPU calibration (its GPU-only options refused)."""
    if getattr(args, "gpu", False):
        return cmd_calibrate_gpu(args)
    for opt, v in (("--from-measurements", args.from_measurements),
                   ("--measurements-out", args.measurements_out)):
        if v is not None:
            raise ConfigError(None, opt, "a GPU calibration option: add --gpu")
    if args.hw is None:
        args.hw = "hwconfigs/host.yaml"
    from sim.engines.cpu.calibrate import cmd_calibrate as cpu
    return cpu(args)
