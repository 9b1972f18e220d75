"""No pickle anywhere: no module of the product imports a pickler."""
import re
from pathlib import Path


def test_no_pickle_in_the_product():
    # "no pickle anywhere": no module of the product imports it (multiprocessing's own transport
    # of the validation groups and sweep points is by module-level function names and plain data)
    root = Path(__file__).resolve().parents[1]
    hits = [f"{p.relative_to(root)}:{i}" for d in ("sim", "analysis", "research", "tools", "bench")
            for p in (root / d).rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.match(r"\s*(import|from)\s+(c?pickle|dill|cloudpickle)\b", line)]
    assert not hits, hits
