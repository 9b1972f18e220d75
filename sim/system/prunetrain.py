"""Whole training runs epoch by epoch: PruneTrain channel trajectories, dynamic mini-batch, per-epoch
compute, communication and FLOPs, for any method (dense is the trivial trajectory).

Channel trajectory: per layer (c_in, c_out) from epoch e on. Either a file
  YAML: {schema: 1, workload: NAME, points: {EPOCH: {LAYER: [c_in, c_out], ...}, ...}}
  CSV : header epoch,layer,c_in,c_out
(a layer missing from a point keeps its dense widths; a point holds until the next one; the layers
that write and read one channel space must agree on its width, a depthwise conv's two sides
included), or the parametric model below. Widths change only at reconfiguration epochs (every
`interval` epochs).

Parametric model (documented assumptions, NOT fitted to the published Table 1): every channel space
s (tensors tied by residual adds and pools share one, sim.workload) keeps the fraction
    keep_s(e) = k_s + (1 - k_s) * exp(-e / tau),   tau = tau_frac * epochs,
sampled at each reconfiguration epoch, width = max(1, round(keep * C)) (so odd counts arise as in
real PruneTrain runs). k_s = `keep` (0.5) for plain spaces and `residual_keep` (0.75) for residual
nodes, where the channel union keeps any channel one of the sharing convs still uses;
tau_frac = 0.2: the group lasso zeroes most channels early, then the counts level off. The
network input and the classifier outputs are never pruned. All three are round numbers; the model
has no dependence on the lasso ratio rho (a captured trajectory is what resolves that).

Dynamic mini-batch (METHODS.md 3): after each reconfiguration the per-device batch grows in steps of
32 while the rule's capacity holds; the learning rate scales by the same ratio. Three rules:
"device" (the memory footprint, sim.system.memory with the framework profile's
activation_overhead, within the cluster's device memory minus its reserve), "relative" (that
footprint within the dense network's at the initial batch: the initial batch taken to fill the
device) and "compute" (the iteration's MACs, PruneTrain's own count `authors_macs`, within the
dense network's at the initial batch: the per-iteration work held). METHODS.md states the memory
rule; none of the three fits both published schedules at the published FLOPs in the authors'
networks' shape (docs/explanation/system.md), so the default stays "device".
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from sim.errors import ConfigError
from sim.methods.info import method_info
from sim.methods.prunetrain import authors_bn_words, authors_macs, space_channels  # noqa: F401 (re-exported)
from sim.system.collectives import levels_of
from sim.stepops import method_parts
from sim.system.memory import BATCH_STEP, footprint
from sim.system.timeline import (IterationResult, layer_times, resolve_framework,
                                 scheduled_wgc_seconds, simulate_iteration)
from sim.system.trajectory import (Trajectory, apply_widths, layer_widths,  # noqa: F401 (re-exported)
                                   residual_paths)
from sim.workload import Workload, lower
from sim.yamlio import load_yaml_file

# training-set sizes; the iterations per epoch follow from them
DATASET_SAMPLES = {"cifar10": 50_000, "cifar100": 50_000, "imagenet": 1_281_167}
# [V] CIFAR: Krizhevsky 2009 (50,000 training images); ImageNet-1k: ILSVRC2012 train set
DEFAULT_EPOCHS = {"cifar10": 182, "cifar100": 182, "imagenet": 90}      # [U] common schedules
DEFAULT_BATCH = {"cifar10": 128, "cifar100": 128, "imagenet": 64}       # PruneTrain's initial batches


def parametric_trajectory(workload: Workload, epochs: int, interval: int, keep: float = 0.5,
                          residual_keep: float = 0.75, tau_frac: float = 0.2) -> Trajectory:
    chans = space_channels(workload)
    first, last = workload.layers[0], workload.layers[-1]
    fixed = {first.in_space} | ({last.out_space} if last.op == "fc" else set())
    residual = {l.residual_node for l in workload.layers if l.residual_node}
    tau = max(tau_frac * epochs, 1e-9)
    pts = [(0, ())]
    for e in range(interval, epochs, interval):
        width = {}
        for s, c in chans.items():
            k = residual_keep if s in residual else keep
            width[s] = c if s in fixed else max(1, round(c * (k + (1 - k) * math.exp(-e / tau))))
        pts.append((e, layer_widths(workload, chans, width)))
    return Trajectory(tuple(pts), f"parametric model (keep={keep}, residual_keep={residual_keep}, "
                                  f"tau_frac={tau_frac}, interval={interval})")


def lasso_trajectory(workload: Workload, rho: float, interval: int, epochs: int,
                     global_batch: int, samples: int | None = None,
                     depth: float = 1.0, weight_decay: float | None = None,
                     blocks: bool = True) -> Trajectory:
    """The default PruneTrain trajectory: the lasso-dose model (sim.system.prunetrain_model) fitted to
    real group-lasso runs (its stored fit), with rho and the dataset's schedule as inputs (depth, blocks: see
    prunetrain_model.model_trajectory; 1 and True are the model; weight_decay: the SGD decay,
    default the authors' for the data set, prunetrain_model.default_schedule)."""
    from sim.system.prunetrain_model import default_schedule, model_trajectory
    ds = workload.dataset or ""
    samples = samples or DATASET_SAMPLES.get(ds)
    if samples is None:
        raise ConfigError(workload.origin, "dataset", f"unknown training-set size for dataset "
                          f"{ds!r} (known: {', '.join(DATASET_SAMPLES)})")
    if weight_decay is not None and not (math.isfinite(weight_decay) and weight_decay > 0):
        raise ConfigError(None, "weight_decay", f"must be a finite number > 0, got {weight_decay}")
    sched = default_schedule(ds, epochs, global_batch, samples, weight_decay)
    return model_trajectory(workload, rho, interval, sched, depth=depth, blocks=blocks)


def parse_model_spec(text: str) -> dict[str, float]:
    """'model' or 'model:keep=0.4,residual_keep=0.7,tau_frac=0.3' -> keyword arguments."""
    _, _, rest = text.partition(":")
    out = {}
    for part in filter(None, rest.split(",")):
        k, eq, v = part.partition("=")
        if not eq or k not in ("keep", "residual_keep", "tau_frac"):
            raise ConfigError(None, "--trajectory", f"bad model parameter {part!r} (keep, "
                              "residual_keep, tau_frac)")
        try:
            x = float(v)
        except ValueError:
            raise ConfigError(None, "--trajectory", f"{k}={v!r} is not a number") from None
        if not 0 < x <= 1:
            raise ConfigError(None, "--trajectory", f"{k}={v} must be in (0, 1]")
        out[k] = x
    return out


def load_trajectory(path: str | Path, workload: Workload) -> Trajectory:
    """Read a YAML or CSV trajectory; every problem names the file and the field."""
    p = Path(path)
    file = str(p)
    if p.suffix != ".csv":
        return trajectory_from_doc(load_yaml_file(p, ConfigError), workload, file)
    raw: dict[int, dict[str, tuple]] = {}
    from sim.limits import BUDGETS, read_input_text
    text = read_input_text(p, error=ConfigError, what="trajectory file",
                           max_bytes=BUDGETS["text_bytes"].limit)
    rd = csv.DictReader(io.StringIO(text, newline=""))
    if rd.fieldnames is None or set(rd.fieldnames) != {"epoch", "layer", "c_in", "c_out"}:
        raise ConfigError(file, "header", "expected columns epoch,layer,c_in,c_out")
    for i, row in enumerate(rd, start=2):
        try:
            e, a, b = int(row["epoch"]), int(row["c_in"]), int(row["c_out"])
        except (TypeError, ValueError):
            raise ConfigError(file, f"line {i}", "epoch, c_in and c_out must be "
                              "integers") from None
        raw.setdefault(e, {})[row["layer"]] = (a, b, f"line {i}")
    return _trajectory(raw, workload, file)


def trajectory_from_doc(doc, workload: Workload, file: str) -> Trajectory:
    """A trajectory document already parsed (a run file's YAML, read once by a caller that also
    needs its other fields); `file` names it in errors."""
    raw: dict[int, dict[str, tuple]] = {}
    if not isinstance(doc, dict) or "points" not in doc:
        raise ConfigError(file, "points", "missing (expected {points: {EPOCH: {LAYER: "
                          "[c_in, c_out]}}})")
    if doc.get("workload") not in (None, workload.name):
        raise ConfigError(file, "workload", f"trajectory is for {doc['workload']!r}, not "
                          f"{workload.name!r}")
    if not isinstance(doc["points"], dict):
        raise ConfigError(file, "points", "expected a mapping of epoch to layers")
    for e, layers in doc["points"].items():
        if isinstance(e, bool) or not isinstance(e, int):
            raise ConfigError(file, f"points.{e}", "epoch must be an integer")
        if not isinstance(layers, dict):
            raise ConfigError(file, f"points.{e}", "expected a mapping of layer to [c_in, c_out]")
        for n, v in layers.items():
            f = f"points.{e}.{n}"
            if not (isinstance(v, list) and len(v) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
                raise ConfigError(file, f, "expected [c_in, c_out] integers")
            raw.setdefault(e, {})[str(n)] = (v[0], v[1], f)
    removed = _one_channel_blocks_removed(doc, raw, workload)
    tr = _trajectory(raw, workload, file)
    if removed:
        tr = replace(tr, source=f"{tr.source}; {removed} block(s) at one inner channel after the "
                     "first lr decay read as removed (a run recorded before `dead` records)")
    return tr


def _one_channel_blocks_removed(doc: dict, raw: dict, workload: Workload) -> int:
    """A run file written before runs recorded dead spaces (per_epoch entries without `dead`)
    keeps a space whose channels all died at one all-zero channel, where PruneTrain removes the
    block. From the first lr decay on (the first epoch the logged lr leaves its maximum:
    prunetrain_model.high_lr_epochs, the same rule as the block-death fit's rows), read a residual
    path's inner space at one channel as dead (width 0 on both sides; edits raw in place). Why
    only then: the run with `dead` records (resnet20-digits8 rho 0.25) held 117 of its 394
    one-channel space-epochs live, all before the decay, while the lr kept a last channel
    hovering over the zeroing threshold; after it, 5 of 6 one-channel spaces were dead
    (docs/explanation/system.md). Returns the blocks removed at the last point."""
    from sim.system.prunetrain_model import high_lr_epochs
    per, run = doc.get("per_epoch"), doc.get("run")
    if not (isinstance(per, list) and per and isinstance(run, dict)) \
            or any(isinstance(x, dict) and "dead" in x for x in per):
        return 0
    try:
        low = [e for e, h in enumerate(high_lr_epochs(per, int(run["batch"]))) if not h]
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return 0
    if not low:
        return 0
    paths = residual_paths(workload)
    removed = 0
    for e in sorted(x for x in raw if x >= low[0]):
        ws = raw[e]
        blocks = set()
        for n, (a, b, f) in list(ws.items()):
            p = paths.get(n)
            if p is None or n == p.layers[-1] or not 0 < b <= 1:
                continue
            nxt = p.layers[p.layers.index(n) + 1]
            ws[n] = (a, 0, f)
            if nxt in ws:
                ws[nxt] = (0, ws[nxt][1], ws[nxt][2])
            blocks.add(p.add)
        removed = len(blocks)
    return removed


def _trajectory(raw: dict, workload: Workload, file: str) -> Trajectory:
    """{epoch: {layer: (c_in, c_out, field)}} checked against the workload -> Trajectory."""
    by_name = {l.name: l for l in workload.layers}
    paths = residual_paths(workload)
    pts = []
    for e in sorted(raw):
        if e < 0:
            raise ConfigError(file, f"epoch {e}", "epochs start at 0")
        ws = []
        for n, (a, b, f) in raw[e].items():
            if n not in by_name:
                raise ConfigError(file, f, f"no layer {n!r} in workload {workload.name}")
            l = by_name[n]
            if not (0 <= a <= l.c_in and 0 <= b <= l.c_out):
                raise ConfigError(file, f, f"widths ({a}, {b}) outside 0..({l.c_in}, {l.c_out})")
            if (a == 0 or b == 0) and n not in paths:
                raise ConfigError(file, f, "width 0 removes the layer, which PruneTrain does only "
                                  "to a residual block's path (its convs up to the add); "
                                  f"{n} is on none (use 1 for a space with one channel left)")
            if l.depthwise and a != b:
                raise ConfigError(file, f, f"a depthwise conv's input and output are one channel "
                                  f"space: widths ({a}, {b}) must agree")
            if l.groups > 1 and not l.depthwise and (a, b) != (l.c_in, l.c_out):
                raise ConfigError(file, f, "grouped convs cannot be narrowed by this model "
                                  "(depthwise convs can)")
            ws.append((n, a, b))
        _check_shared_spaces(workload, raw[e], file, e)
        pts.append((e, tuple(ws)))
    if not pts:
        raise ConfigError(file, "points", "no trajectory points")
    return Trajectory(tuple(pts), f"file {file}")


def _check_shared_spaces(workload: Workload, point: dict, file: str, epoch: int) -> None:
    """Every layer that writes or reads a channel space must see one width there (a producer
    writing 60 channels to a consumer reading 64 is no network); layers a point leaves out keep
    their dense widths, and a removed residual path's layers (a width 0) are skipped."""
    chans = space_channels(workload)
    seen: dict[str, tuple[int, str]] = {}
    for l in workload.layers:
        a, b, fld = point.get(l.name, (l.c_in, l.c_out, None))
        if a == 0 or b == 0:
            continue
        per = l.c_in // chans[l.in_space] if l.op == "fc" else 1
        if a % per:
            raise ConfigError(file, fld, f"an FC layer reading {per} positions a channel needs "
                              f"a multiple of {per} inputs, got {a}")
        for space, width, side in ((l.in_space, a // per, "reads"), (l.out_space, b, "writes")):
            other = seen.setdefault(space, (width, l.name))
            if other[0] != width:
                raise ConfigError(file, fld or f"points.{epoch}.{l.name} (not listed: dense)",
                                  f"{l.name} {side} {width} channels of a space {other[1]} has "
                                  f"at {other[0]} (layers sharing a channel space keep one "
                                  "width)")


# ------------------------------------------------------------------------------------ FLOPs

def gemm_flops(workload: Workload, batch: int) -> int:
    """FWD + AGBP (where needed) + WGC flops of one iteration on one device."""
    tot = 0
    for l in workload.layers:
        for ph, g in lower(l, batch).items():
            if ph != "agbp" or l.needs_agbp:
                tot += g.flops
    return tot


def charged_epochs(epochs: int, interval: int) -> int:
    """Epochs the authors' cost script charges a PruneTrain run of `epochs` epochs (see
    authors_training_fraction): the initial network's interval and one interval per
    reconfiguration, the one after the last epoch included."""
    return interval * (epochs // interval + 1)


def authors_training_fraction(workload: Workload, trajectory: Trajectory, epochs: int,
                              interval: int, cost=authors_macs) -> float:
    """Training MACs vs dense as PruneTrain's Table 1 counts them (cost: authors_macs, or
    authors_bn_words for its batch-norm traffic, summed the same way). The authors' cost script
    (src/scripts/calc_cost.py, Sangkug Lym's 2019 code as imported at github.com/VictorSuciu/
    prunetrain commit 3d2abbe; its constants are the paper's ImageNet setting: reconf_int 5,
    mini_batch 256, 90 epochs) sums per network authors_macs at a fixed number of iterations an
    epoch: the initial network, then the network of every "Generating a new dense architecture"
    in the training log, i.e. of each reconfiguration at epoch k * interval (1-based; k = 1 ..
    epochs // interval, the cifar and imagenet scripts' `epoch % sparse_interval == 0`, so the
    last epoch's too when interval divides it), each times reconf_int epochs; dense is the
    initial network times `epochs`. Where interval divides the epochs, the script means to drop
    the last reconfiguration ("Remove the final recfguration info for total training cost") but
    does so after the totals are taken; where it does not, the last network is charged a whole
    interval for the epochs left. So a run is charged charged_epochs(): 95 of ImageNet's 90
    epochs, 190 of CIFAR's 182.
    A trajectory point at epoch e holds the widths trained from 0-based epoch e on, the ones the
    reconfiguration after 1-based epoch e chose; the last reconfiguration's are the point at
    `epochs` where the trajectory has one, else its last point's."""
    if epochs < 1 or interval < 1:
        raise ConfigError(None, "interval", f"epochs and interval must be >= 1, got {epochs} "
                                            f"and {interval}")
    base = cost(workload, 1)
    nets = [base] + [cost(apply_widths(workload, trajectory.widths_at(k * interval)), 1)
                     for k in range(1, epochs // interval + 1)]
    return interval * sum(nets) / (epochs * base)


# ------------------------------------------------------------------------------------ runs

@dataclass(frozen=True)
class Epoch:
    epoch: int
    batch: int
    lr_scale: float
    iterations: int
    iteration: IterationResult
    seconds: float
    comm_bytes: int
    comm_seconds: float
    exposed_comm_seconds: float
    flops: int           # per device, whole epoch (FWD + AGBP + WGC GEMMs)
    authors_macs: int    # per device, whole epoch, PruneTrain authors' accounting
    params: int
    memory_bytes: int

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "batch": self.batch, "lr_scale": self.lr_scale,
                "iterations": self.iterations, "seconds": self.seconds,
                "iteration_seconds": self.iteration.seconds, "comm_bytes": self.comm_bytes,
                "comm_seconds": self.comm_seconds, "exposed_comm_seconds": self.exposed_comm_seconds,
                "flops": self.flops, "authors_macs": self.authors_macs, "params": self.params,
                "memory_bytes": self.memory_bytes, "skipped_wgc_bytes_per_iteration":
                    self.iteration.skipped_bytes}


@dataclass(frozen=True)
class Run:
    method: str
    workload: str
    devices: int
    timing_source: str
    trajectory: str
    epochs: tuple[Epoch, ...]
    notes: tuple[str, ...] = field(default=())
    framework: str = ""      # the framework profile the step was timed under (sim.frameworks)

    @property
    def train_seconds(self) -> float:
        return sum(e.seconds for e in self.epochs)

    @property
    def comm_bytes(self) -> int:
        return sum(e.comm_bytes for e in self.epochs)

    @property
    def comm_seconds(self) -> float:
        return sum(e.comm_seconds for e in self.epochs)

    def flops_vs(self, dense: Run, count: str = "flops") -> float:
        """Training FLOPs vs a dense run's, summed over the epochs run: count "flops" the
        engine's GEMM FLOPs, "authors_macs" the authors' MAC formula (for Table 1's own count,
        which charges epochs the run did not run, see authors_training_fraction)."""
        return (sum(getattr(e, count) for e in self.epochs)
                / sum(getattr(e, count) for e in dense.epochs))

    def to_json(self) -> dict:
        return {"method": self.method, "workload": self.workload, "devices": self.devices,
                "timing_source": self.timing_source, "framework": self.framework,
                "trajectory": self.trajectory, "train_seconds": self.train_seconds, "comm_bytes": self.comm_bytes,
                "comm_seconds": self.comm_seconds,
                "exposed_comm_seconds": sum(e.exposed_comm_seconds for e in self.epochs),
                "flops": sum(e.flops * self.devices for e in self.epochs),
                "notes": list(self.notes), "per_epoch": [e.to_json() for e in self.epochs]}


# The dynamic mini-batch's capacity rules (module docstring); "compute" is not the paper's stated
# rule: it fits the published ImageNet steps, the memory rules do not (docs/explanation/system.md)
BATCH_RULES = ("device", "relative", "compute")


def batch_rule(rule: str, workload: Workload, batch: int, capacity_bytes: float, act_bytes: int,
               reserved: int, overhead: float = 0.0):
    """(fits, capacity): fits(w, b) says whether per-device batch b of network w stays within the
    rule's capacity (bytes for the two memory rules, MACs an iteration for "compute")."""
    if rule not in BATCH_RULES:
        raise ValueError(f"dynamic mini-batch rule {rule!r}: known {', '.join(BATCH_RULES)}")
    if rule == "compute":
        work = authors_macs(workload, batch)
        return (lambda w, b: authors_macs(w, b) <= work), work
    cap = capacity_bytes if rule == "device" else \
        footprint(workload, batch, act_bytes, reserved, overhead).total
    return (lambda w, b: footprint(w, b, act_bytes, reserved, overhead).total <= cap), cap


def _grow_batch(w: Workload, batch: int, fits, cap: int) -> int:
    """Grow in steps of 32 while the rule's capacity holds; never past `cap` (the global batch
    may not exceed the training set)."""
    while batch + BATCH_STEP <= cap and fits(w, batch + BATCH_STEP):
        batch += BATCH_STEP
    return batch


def check_batch_steps(batch_steps, dynamic_batch, epochs: int) -> dict[int, int]:
    """A given batch schedule as {epoch: per-device batch}; refused with a dynamic mini-batch
    (the two would both set the batch) and where an epoch or a batch is out of range."""
    if not batch_steps:
        return {}
    if dynamic_batch:
        raise ValueError("a given batch schedule (batch_steps) and a dynamic mini-batch "
                         f"({dynamic_batch!r}) both set the batch: pass one")
    steps = {}
    for e, b in batch_steps:
        if not (0 <= int(e) < epochs) or int(b) < 1 or int(e) in steps:
            raise ValueError(f"batch schedule step ({e}, {b}): the epoch must be in "
                             f"0..{epochs - 1} and appear once, the batch at least 1")
        steps[int(e)] = int(b)
    return steps


def _wgc_skips(workload: Workload, method, notes: list
               ) -> tuple[list[frozenset[str]], bool, bool]:
    """Which convs the method's schedule approximates at each batch of its period; whether they
    skip WGC and the all-reduce (zero: `skip-wgc`), or their WGC is charged as the engine's
    kernels for the method's result with the full dW still all-reduced (random, approx:
    `wgc-kernels`, the third value True). The method's system-level effect noted in `notes`."""
    from sim.methods.schedule import applies, coverage, paper_schedule
    info = method_info(method)
    if info.system_effect in ("skip-wgc", "wgc-kernels"):
        table = paper_schedule(method.get("schedule"), len(workload.convs))
        skip_sets = [frozenset(c.name for i, c in enumerate(workload.convs) if applies(table, i, b))
                     for b in range(table.shape[1])]
        charged = info.system_effect == "wgc-kernels"
        if charged:
            notes.append(_charged_note(workload, method, table, coverage(table)))
        return skip_sets, info.skips_allreduce, charged
    if info.system_effect == "nm-agbp":
        notes.append(f"{method.id}: AGBP on the engine's n:m sparse tensor cores (nominal density "
                     "n/m, pruning and compression passes charged); roofline fallback: dense")
    elif info.system_effect == "not-modelled":
        notes.append(f"{method.id}: per-layer compute effect not wired at system level; dense "
                     "layer times and unchanged communication")
    return [frozenset()], False, False


# what the engines run for a scheduled pair's WGC, by the structure of the method's result
_CHARGED_KERNELS = {
    "per-channel": "the patch engine's approximate WGC (dW memset, patch kernel, input and dW "
                   "transposes) at {k} position(s) per (sample, output channel), the positions "
                   "a seeded uniform pattern (no gradient is recorded at system level; the "
                   "kernel's L2 hits depend on them)",
    "generated": "the engine's dW generation kernel (N(0, 1/B^2) draws, one bandwidth-bound "
                 "kernel; the paper's TensorFlow version was slower)",
}


def _charged_note(workload: Workload, method, table, cover: float) -> str:
    """The train note of a `wgc-kernels` method: what each scheduled pair is charged."""
    from sim.methods import method_for
    conv = next((c for i, c in enumerate(workload.convs) if table[i].any()), None)
    mr = method_for(method).system_result(method, conv, 1) if conv is not None else None
    what = _CHARGED_KERNELS.get(mr.structure if mr is not None else "", "its WGC kernels")
    k = mr.pick.k if mr is not None and mr.pick is not None else 1
    return (f"{method.id}: schedule {method.get('schedule')} approximates "
            f"{int(table.any(axis=1).sum())} of {table.shape[0]} convs over a "
            f"{table.shape[1]}-batch period ({cover:.0%} of (conv, batch) pairs); each such "
            f"pair's WGC is charged as {what.format(k=k)} instead of the dense WGC GEMM, "
            "averaged over the period; AGBP exact; the full dW all-reduced as dense's")


def _period_iterations(timing, skip_sets, comm_skip: bool, alt: dict | None, levels, bucket
                       ) -> tuple[list, list]:
    """One iteration per batch of the method's schedule period: the convs of skip_sets[i] skip
    WGC (and its all-reduce where comm_skip: zero), or, where `alt` is given (random, approx: their charged
    WGC seconds by conv), run that instead with the full dW still all-reduced. Also the scheduled convs' WGC
    summed over the period, [dense, charged]."""
    its, wgc = [], [0.0, 0.0]
    for s in skip_sets:
        lt = timing.layers
        if alt is not None:
            wgc[0] += sum(x.wgc for x in lt if x.name in s and x.name in alt)
            wgc[1] += sum(alt[x.name] for x in lt if x.name in s and x.name in alt)
            lt = tuple(replace(x, wgc=alt[x.name]) if x.name in s and x.name in alt else x
                       for x in lt)
            s = frozenset()
        elif s and not comm_skip:   # WGC skipped, the dW still all-reduced
            lt = tuple(replace(x, wgc=0.0) if x.name in s else x for x in lt)
            s = frozenset()
        its.append(simulate_iteration(lt, levels, bucket, timing.optimizer, s,
                                      timing.step_overhead))
    return its, wgc


def simulate_run(workload: Workload, cluster, method, *, epochs: int, batch: int,
                 trajectory: Trajectory | None = None, dynamic_batch: str | None = None,
                 engine: str = "auto", samples: int | None = None, framework=None,
                 batch_steps: tuple[tuple[int, int], ...] | None = None, plan=None) -> Run:
    """Per-epoch simulated time, communication and FLOPs of the whole training step.

    method: a MethodSpec. trajectory: widths over epochs (None: dense). dynamic_batch: None,
    "device" or "relative" (see the module docstring). batch_steps: a given per-device batch
    schedule instead, ((epoch, batch), ...) from each epoch on (`batch` before the first step),
    e.g. a published one replayed on the model's widths; not with dynamic_batch, and not checked
    against the memory (`train --batch-steps` checks it). framework: the framework profile
    whose non-GEMM kernels, optimizer and per-step overhead the step includes (a name, a path, a
    FrameworkProfile; None: sim.system.timeline.DEFAULT_FRAMEWORK). Distinct (widths, batch)
    pairs are simulated once and reused across epochs. plan: PruneTrain's spec where `method` is
    the gradient method combined with it (`prunetrain+sdgp-mag`): its group-lasso kernels join
    the step."""
    samples = samples or DATASET_SAMPLES.get(workload.dataset or "", None)
    if samples is None:
        raise ConfigError(workload.origin, "dataset", f"unknown training-set size for dataset "
                          f"{workload.dataset!r} (known: {', '.join(DATASET_SAMPLES)})")
    dev, tr = cluster.device, cluster.training
    profile = resolve_framework(framework)
    act = int(tr.activation_bytes.value)
    reserved = int(dev.reserved.value)
    over = profile.activation_overhead     # the framework's peak memory beyond autograd's
    levels = levels_of(cluster)
    notes = []
    fits = None
    steps = check_batch_steps(batch_steps, dynamic_batch, epochs)
    if dynamic_batch:
        fits, capacity = batch_rule(dynamic_batch, workload, batch, dev.memory.value, act,
                                    reserved, over)
        if not fits(workload, batch):
            notes.append(f"initial batch {batch} does not fit {capacity / 1e9:.2f} GB by the "
                         "memory model; kept anyway")
    skip_sets, comm_skip, charged = _wgc_skips(workload, method, notes)
    step_method = (plan, method) if plan is not None and plan != method else method
    if any(method_info(m).is_channel_plan and m.get("timing") == "authors"
           for m in method_parts(step_method)):
        notes.append("prunetrain timing=authors: each step without the group-lasso penalty's "
                     "forward, as the paper's scripts timed it (the wall time is longer)")
    cache: dict = {}

    def stats(widths: dict, w: Workload, b: int):
        """Mean over the schedule period of one iteration at batch b (memoized)."""
        key = (tuple(sorted(widths.items())), b)
        if key not in cache:
            timing = layer_times(w, b, dev, tr, engine, step_method, profile)
            # random / approx: the scheduled convs' WGC as the method's kernels (full dW sent)
            alt = scheduled_wgc_seconds(w, b, dev, tr, engine, method,
                                        frozenset().union(*skip_sets)) if charged else None
            its, wgc = _period_iterations(timing, skip_sets, comm_skip, alt, levels,
                                            tr.bucket.value)
            mean = lambda f: sum(f(i) for i in its) / len(its)
            cache[key] = dict(first=its[0], seconds=mean(lambda i: i.seconds),
                              comm_bytes=mean(lambda i: i.comm_bytes),
                              comm_seconds=mean(lambda i: i.comm_seconds),
                              exposed=mean(lambda i: i.exposed_comm_seconds),
                              flops=gemm_flops(w, b), macs=authors_macs(w, b), params=w.params(),
                              memory=footprint(w, b, act, reserved, over).total,
                              source=timing.source,
                              wgc=[v / len(its) for v in wgc])
        return cache[key]

    out = []
    b = batch
    last_widths = None
    source = ""
    nd = cluster.devices
    for e in range(epochs):
        widths = trajectory.widths_at(e) if trajectory else {}
        w = apply_widths(workload, widths)
        if fits is not None and widths != last_widths and e > 0:
            b = _grow_batch(w, b, fits, samples // nd)
        b = steps.get(e, b)
        last_widths = widths
        st = stats(widths, w, b)
        source = st["source"]
        # full iterations at batch b, then one partial iteration with what is left of the epoch
        n_full = samples // (b * nd)
        rem_b = math.ceil((samples - n_full * b * nd) / nd)
        parts = [(n_full, st)] + ([(1, stats(widths, w, rem_b))] if rem_b else [])
        tot = lambda k: sum(n * x[k] for n, x in parts)
        out.append(Epoch(e, b, b / batch, n_full + (1 if rem_b else 0), st["first"], tot("seconds"),
                         int(round(tot("comm_bytes"))), tot("comm_seconds"), tot("exposed"),
                         tot("flops"), tot("macs"), st["params"], st["memory"]))
    if charged and cache:
        (_, b0), st0 = next(iter(cache.items()))
        d, a = st0["wgc"]
        notes.append(f"{method.id}: scheduled WGC per iteration at batch {b0} (mean over the "
                     f"period): {d * 1e3:.3f} ms dense -> {a * 1e3:.3f} ms charged")
    if steps:
        notes.append("batch schedule given: " + ", ".join(f"{b} from epoch {e}"
                                                           for e, b in sorted(steps.items())))
    if dynamic_batch or steps:
        notes.append("learning rate scaled by batch / initial batch (lr_scale), as PruneTrain does")
    return Run(method.label, workload.name, cluster.devices, source,
               trajectory.source if trajectory else "dense (no trajectory)", tuple(out), tuple(notes),
               profile.name)
