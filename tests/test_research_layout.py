"""research/ is apart from the simulator's runtime path: sim never imports it, `prunesim train`
loads the stored PruneTrain fit without research or any run file, and the fits research stores
(the runtime fit, the held-out fits `prunesim validate` reads) belong to the current run files and
fitting code."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from research.prunetrain import fitting
from sim.system.prunetrain_model import (FIT_PATH, WRITE_FIT, bundled_fit, fit_from_doc,
                                         fit_to_doc)

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_sim_never_imports_research():
    """The dependency runs research -> sim (and analysis -> research), never sim -> research."""
    bad = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p)
                                            if m == "research" or m.startswith("research."))
           for p in sorted((ROOT / "sim").rglob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}


def test_the_checker_sees_a_research_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from research.prunetrain import fitting\n")
    assert "research.prunetrain" in _imports(f)


def test_a_prunetrain_trajectory_loads_no_research_module():
    """The runtime model reads sim/data/prunetrain-fit.json: the trajectory of a training run
    imports nothing of research/ (nor reads a run file)."""
    code = ("import sys; from sim.system.prunetrain import lasso_trajectory; "
            "from sim.workload import load_workload; "
            "lasso_trajectory(load_workload('resnet20'), 0.25, 10, 182, 128); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'research'))")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_the_stored_fit_reads_back_exactly():
    """fit_to_doc / fit_from_doc: floats through JSON unchanged, tuples stay tuples."""
    fit = bundled_fit()
    again = fit_from_doc(json.loads(json.dumps(fit_to_doc(fit))))
    assert again == fit and isinstance(again.runs, tuple) and isinstance(again.death, tuple)


def test_the_held_out_fits_are_stored_for_the_current_runs_and_code():
    """research/prunetrain/data/held-out-fits.json: its key is the digest of the fitted run files
    and of the fitting code (held_out_key), and it holds a fit for every training set of the
    validation's held-out checks (held_out_trains). A change to the runs or to the fitting code
    without rewriting it fails here, with the command that rewrites it (else `prunesim validate`
    refits them all, most of an hour)."""
    doc = json.loads(fitting.HELD_OUT_FITS.read_text())
    key = {k: doc.get(k) for k in ("runs_digest", "code_digest")}
    assert key == fitting.held_out_key(), f"stale held-out fits: run `{WRITE_FIT}`"
    stored = {e["key"] for e in doc["fits"]}
    wanted = {fitting._train_key(train, False) for _, train in fitting.held_out_trains()}
    assert stored == wanted, f"held-out fits missing or extra: run `{WRITE_FIT}`"


def test_held_out_fit_reads_the_stored_fit_without_refitting(monkeypatch, capsys):
    """With the key current, a stored training set is read (fit_runs is not called, no note)."""
    def refit(*a, **k):
        raise AssertionError("refitted a stored held-out fit")
    monkeypatch.setattr(fitting, "fit_runs", refit)
    what, train = fitting.held_out_trains()[0]
    f = fitting.held_out_fit(train)
    assert f.runs == tuple(r.name for r in train) and f.death is None
    assert capsys.readouterr().err == ""


def test_write_held_out_fits_stores_every_training_set_under_the_current_key(tmp_path,
                                                                             monkeypatch):
    """The writer's file (a stand-in fit per set: the real ones take minutes each) has the
    current key and one entry per training set, each read back as the fit written."""
    stand_in = bundled_fit()
    monkeypatch.setattr(fitting, "_level_fit", lambda train: stand_in)
    seen = []
    out = fitting.write_held_out_fits(tmp_path / "fits.json", seen.append)
    doc = json.loads(out.read_text())
    assert {k: doc[k] for k in ("runs_digest", "code_digest")} == fitting.held_out_key()
    assert [e["held_out"] for e in doc["fits"]] == seen == [w for w, _ in
                                                              fitting.held_out_trains()]
    assert all(fit_from_doc(e["fit"]) == stand_in for e in doc["fits"])


def test_code_digest_ignores_docstrings_and_comments_but_not_code(tmp_path):
    a = tmp_path / "a.py"
    a.write_text('"""Doc."""\nX = 1  # one\n\n\ndef f():\n    """Say."""\n    return X\n')
    b = tmp_path / "b.py"
    b.write_text('"""Other words,\nover two lines."""\nX = 1\n\ndef f():\n    # why\n'
                 '    """Else."""\n    return X\n')
    c = tmp_path / "c.py"
    c.write_text('"""Doc."""\nX = 2  # one\n\n\ndef f():\n    """Say."""\n    return X\n')
    assert fitting.code_text(a) == fitting.code_text(b) != fitting.code_text(c)


def test_the_stored_runtime_fit_names_the_fitted_runs():
    doc = json.loads(FIT_PATH.read_text())
    assert doc["runs_digest"] == fitting.runs_digest(), f"run files changed: run `{WRITE_FIT}`"
    assert list(bundled_fit().runs) == [r.name for r in fitting.bundled_runs()]


@pytest.mark.slow   # one full fit (1-2 min on 2 cores)
def test_a_stored_held_out_fit_is_what_fitting_makes_now():
    """One held-out fit recomputed equals the stored one exactly (the read-back is bit-identical
    to a refit)."""
    doc = json.loads(fitting.HELD_OUT_FITS.read_text())
    trains = dict(fitting.held_out_trains())
    entry = next(e for e in doc["fits"] if e["held_out"] == "rho=0.3")
    fresh = fitting.fit_runs(trains["rho=0.3"], spread=False)
    assert fit_from_doc(entry["fit"]) == fresh
