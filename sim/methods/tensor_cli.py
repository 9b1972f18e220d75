"""`prunesim prune`: apply one method to one user tensor (.npy in, .npy out) and report its work."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from sim.errors import PrunesimError
from sim.methods import apply_method, method_info, parse_method, refuse_unused
from sim.methods.rng import stream_key
from sim.outputs import check_output
from sim.workload import Layer


class TensorError(PrunesimError):
    """A user tensor file is unusable."""


def _read_tensor(path: str) -> np.ndarray:
    p = Path(path)
    from sim.limits import check_input_file
    check_input_file(p, error=TensorError, what="tensor file")   # a FIFO or device: refused
    try:
        a = np.load(p, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - a corrupt header can raise SyntaxError and others
        raise TensorError(p, None, f"not a readable .npy file ({type(e).__name__}: {e})") from None
    if a.dtype.kind != "f":
        raise TensorError(p, "dtype", f"expected a floating-point tensor, got {a.dtype}")
    if a.ndim not in (2, 4):
        raise TensorError(p, "shape", f"expected 4-D (N,C,H,W / N,H,W,C) or 2-D (N,F), got {list(a.shape)}")
    if a.size == 0:
        raise TensorError(p, "shape", "empty tensor")
    bad = ~np.isfinite(a)
    if bad.any():
        idx = np.unravel_index(int(np.argmax(bad)), a.shape)
        raise TensorError(p, "values", f"non-finite value at index {list(map(int, idx))}")
    return a.astype(np.float32, copy=False)


def _layer_for(a: np.ndarray, layout: str) -> Layer:
    """A stand-in conv layer with the tensor's geometry (methods only look at op and c_in)."""
    if a.ndim == 2:
        n, c, h, w = a.shape[0], a.shape[1], 1, 1
    elif layout == "nhwc":
        n, h, w, c = a.shape
    else:
        n, c, h, w = a.shape
    return Layer(index=1, name="tensor", op="conv" if a.ndim == 4 else "fc", c_in=max(c, 4), c_out=c,
                 h=h, w=w, p=h, q=w, r=1, s=1, stride=1, pad=0, groups=1, bias=False, bn=False,
                 relu=False, in_tensor="t_in", out_tensor="t_out", in_space="t_in",
                 out_space="t_out", residual_node=None)


def cmd_prune(args) -> int:
    overrides = {"p": args.p, "sigma": args.sigma, "nm": args.nm, "keep": args.keep, "k": args.k,
                 "rescale": args.rescale}
    # a parameter given both in the spec and as an option has no defined winner: refuse it
    _, _, rest = str(args.method).partition(":")
    in_spec = {part.partition("=")[0].strip() for part in rest.split(",")} if rest else set()
    for k, v in overrides.items():
        if v is not None and k in in_spec:
            raise TensorError(None, f"--{k}", f"given twice: in --method {args.method!r} and as "
                              f"--{k} {v}; give it once")
    check_output(args.output, inputs=[args.input], force=getattr(args, "force", False),
                 field="OUTPUT")
    try:
        spec = parse_method(args.method, {k: v for k, v in overrides.items() if v is not None})
        refuse_unused(spec, "prune")
    except ValueError as e:
        raise TensorError(None, "--method", str(e)) from None
    if not method_info(spec).transforms_tensor:
        raise TensorError(None, "--method", f"{spec.id} does not transform a gradient tensor "
                          "(random replaces dW; prunetrain acts on weights)")
    a = _read_tensor(args.input)
    if args.layout == "nhwc" and a.ndim == 4:
        x = np.ascontiguousarray(a.transpose(0, 3, 1, 2))
    else:
        x = a
    res = apply_method(spec, _layer_for(a, args.layout), x, key=stream_key(args.seed, 0, 0),
                       batch=a.shape[0], scheduled=True, build_csr=False)
    if res.structure == "per-channel":
        from sim.methods.approx import picks_to_dense
        out = picks_to_dense(res.pick, x.shape if x.ndim == 4 else (*x.shape, 1)).reshape(x.shape)
    elif res.structure == "skipped":
        out = np.zeros_like(x)
    elif res.pruned is None:
        out = x
    else:
        out = res.pruned
    if args.layout == "nhwc" and a.ndim == 4:
        out = out.transpose(0, 2, 3, 1)
    out = np.ascontiguousarray(out, dtype=a.dtype if args.keep_dtype else np.float32)
    dst = Path(args.output)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.save(f, out, allow_pickle=False)
        os.replace(tmp, dst)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise TensorError(dst, None, f"cannot write: {e}") from None
    summary = {"input": str(args.input), "output": str(dst), "shape": list(a.shape),
               "layout": args.layout, "seed": args.seed, **res.summary(),
               "density": float(np.count_nonzero(out)) / out.size}
    summary["method"] = spec.label
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"{spec.label}: {list(a.shape)} {args.layout} -> {dst}")
        print(f"density {summary['density']:.4f} (structure {res.structure})")
        print("work: " + ", ".join(f"{k} {v:,}" for k, v in res.work.as_dict().items()))
        for k, v in res.extra.items():
            print(f"{k}: {v}")
    return 0
