"""Can the trajectory model's plain kind learn a bottleneck's inner spaces? Leave-one-family-out.

The bundled fit takes the plain kind from basic-block and VGG runs only (research.prunetrain.
fitting.PLAIN_FROM_BASIC) and under-keeps every bottleneck run's inner spaces 2-3x. This script asks
whether any of the model's own terms, learnt from the other bottleneck families, would predict
the held-out one, above all the authors' CIFAR ResNet-50 (Table 1's network; a run in
research/prunetrain/data/held-out/cpu-authors-r50 or the fitted folder). For each family held out it
prints the RMS of the plain kept fraction over every epoch and the final values, for

  now      the bundled fit (no expansion term in the plain kind);
  E        the plain kind's expansion terms (xi on the pressure, xi_clock on the clock) fitted to
           the other families' runs, everything else as fitted;
  clock    xi_clock alone (xi = 0);
  refit    (--refit, ~2 min a family) the plain kind refitted from scratch on every residual
           network but the held-out family (basic blocks and bottlenecks; the VGG chains out).

    python -m research.prunetrain.bottleneck_plain_check [--refit]

docs/explanation/system.md records what it printed.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np


FAMILIES = ("resnet50-bt-cifar-", "resnet50-cifar-gap-", "resnet29-bottleneck-w4-",
            "resnet29-bottleneck-cifar10")
XIS = tuple(float(x) for x in np.arange(-3.0, 1.01, 0.25))
CLOCK_XIS = tuple(float(x) for x in np.arange(-3.0, 1.01, 0.25))


def _rms(fit, runs) -> float:
    err = np.concatenate([fit.keep_run(r, False) - r.keep_plain for r in runs])
    return float(np.sqrt(np.mean(err ** 2)))


def _with(fit, xi: float, xc: float):
    return dataclasses.replace(fit, plain=dataclasses.replace(fit.plain, xi=xi, xi_clock=xc))


def _best(fit, train, xis):
    return min(((xi, xc) for xi in xis for xc in CLOCK_XIS),
               key=lambda p: _rms(_with(fit, *p), train))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refit", action="store_true", help="also refit the plain kind from scratch")
    a = ap.parse_args(argv)
    from research.prunetrain import fitting as lm
    fit = lm.bundled_fit()
    runs = list(lm.bundled_runs())
    names = {r.name for r in runs}
    runs += [lm.read_run(p) for p in sorted(lm.HELD_OUT_DIR.glob("cpu-authors-r50/*.yaml"))
             if p.stem not in names]
    bott = [r for r in runs if r.expansion != 1.0]
    fin = lambda f, rs: " ".join(f"{float(f.keep_run(r, False)[-1]):.2f}" for r in rs)  # noqa
    for fam in FAMILIES:
        test = [r for r in bott if r.name.startswith(fam)]
        train = [r for r in bott if not r.name.startswith(fam)]
        if not test:
            continue
        print(f"held out {fam.rstrip('-')} ({len(test)} runs; the others: {len(train)}); "
              f"measured final {' '.join(f'{r.keep_plain[-1]:.2f}' for r in test)}")
        print(f"  now    RMS {_rms(fit, test):.3f}  final {fin(fit, test)}")
        for what, xis in (("E", XIS), ("clock", (0.0,))):
            xi, xc = _best(fit, train, xis)
            f = _with(fit, xi, xc)
            print(f"  {what:6s} RMS {_rms(f, test):.3f}  final {fin(f, test)}  "
                  f"(xi {xi:g}, xi_clock {xc:g})")
        if a.refit:
            keep = lm.PLAIN_FROM_BASIC
            lm.PLAIN_FROM_BASIC = False
            try:
                held = {r.name for r in test}
                f = lm.fit_runs([r for r in runs if r.has_residual and r.name not in held],
                                spread=False)
            finally:
                lm.PLAIN_FROM_BASIC = keep
            f = dataclasses.replace(fit, plain=f.plain)
            print(f"  refit  RMS {_rms(f, test):.3f}  final {fin(f, test)}  (beta {f.plain.beta:g}, "
                  f"gamma {f.plain.gamma:g}, eta {f.plain.eta:g}, xi {f.plain.xi:g}, "
                  f"xi_clock {f.plain.xi_clock:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
