"""Strict YAML reading: safe_load semantics, duplicate keys rejected, size, depth and aliases bounded.

An alias bomb (anchors whose aliases nest ten levels deep) composes into a few hundred nodes but
expands into billions once anything walks it (str(), json.dumps, a checksum): the loader counts
nodes as if every alias were copied and refuses a document above the budget, before constructing
anything. Nesting depth is bounded before composing (the composer recurses; a deep document would
otherwise end in RecursionError, or overflow the C stack in libyaml's), and the file size before
parsing. Limits: sim/limits.py.

Where PyYAML has libyaml, the text is parsed and composed in C (CSafeLoader's parser: ~6x
faster on the 100-200 kB PruneTrain run files), the depth checked on its event stream first (a
flat loop); the checks and the construction are the same Python either way. Without libyaml the
pure-Python loader does the same (its composer counts the depth as it recurses).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from sim.errors import PrunesimError
from sim.limits import BUDGETS


class _Refused(yaml.YAMLError):
    """A well-formed document over a budget (not 'malformed': it says what limit it broke)."""

    def __init__(self, message: str, mark):
        super().__init__(message)
        self.problem, self.problem_mark = message, mark


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (plain safe_load keeps the last silently),
    documents nested deeper than the depth budget, and documents whose aliases expand beyond the
    node budget."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > BUDGETS["yaml_depth"].limit:
                raise _Refused(
                    f"nested deeper than {int(BUDGETS['yaml_depth'].limit)} levels",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self):
        return _checked_single_data(self)


def _checked_single_data(loader):
    """The one document of `loader`, composed, its expanded size checked, then constructed."""
    node = loader.get_single_node()
    if node is None:
        return None
    _check_expanded_size(node)
    return loader.construct_document(node)


_FAST = getattr(yaml, "__with_libyaml__", False)


if _FAST:
    class _CStrictLoader(yaml.CSafeLoader):
        """_StrictLoader's checks on libyaml's parser and composer (the depth on the event stream,
        before composing: see _check_depth)."""

        def get_single_data(self):
            return _checked_single_data(self)


def _check_depth(text: str) -> None:
    """Refuse a document nested deeper than the depth budget, from libyaml's events (a loop, so a
    deep document costs no recursion); malformed YAML surfaces here as the parser's own error."""
    limit = BUDGETS["yaml_depth"].limit
    depth = 0       # open collections: a node event is at level depth + 1, as the composer counts
    for ev in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(ev, yaml.NodeEvent):     # scalars, aliases and collection starts
            if depth + 1 > limit:
                raise _Refused(f"nested deeper than {int(limit)} levels", ev.start_mark)
            if isinstance(ev, yaml.CollectionStartEvent):
                depth += 1
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def _check_expanded_size(root: yaml.Node) -> None:
    """Count the nodes of `root` with every alias expanded (memoized per node, so the count itself
    is linear in the composed graph) and refuse it above the node budget."""
    limit = BUDGETS["yaml_nodes"].limit
    sizes: dict[int, int] = {}
    open_: set[int] = set()   # on the current path: an alias back to one of them is a cycle
    # iterative post-order: a document may hold many nodes, and aliases can share any of them
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        kids = ([x for kv in node.value for x in kv] if isinstance(node, yaml.MappingNode)
                else list(node.value))
        if done:
            open_.discard(id(node))
            n = 1 + sum(sizes.get(id(k), 0) for k in kids)
            if n > limit:
                raise _Refused(
                    f"expands to more than {int(limit):,} nodes (aliases of "
                    "aliases): refusing it", node.start_mark)
            sizes[id(node)] = n
        else:
            if any(id(k) in open_ or k is node for k in kids):
                raise _Refused("recursive alias (a node that contains itself)", node.start_mark)
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False):
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            dup = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "unhashable mapping key",
                                                    key_node.start_mark) from None
        if dup:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}",
                                                    key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
if _FAST:
    _CStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                   _construct_mapping)


def load_yaml_text(text: str, file: str | os.PathLike, error: type[PrunesimError],
                   fast: bool | None = None) -> Any:
    """Parse YAML text strictly (module docstring); fast: libyaml's parser (default: where
    available), False: the pure-Python one (the reference the fast path is tested against)."""
    try:
        if _FAST if fast is None else fast and _FAST:
            try:
                _check_depth(text)
                return yaml.load(text, Loader=_CStrictLoader)  # noqa: S506 - CSafeLoader's
            except _Refused:
                raise
            except yaml.YAMLError:
                pass    # malformed: the pure parser's message names more (the '\t', the alias)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        what = "" if isinstance(e, _Refused) else "malformed YAML: "
        raise error(file, where, f"{what}{getattr(e, 'problem', None) or e}") from None


def load_yaml_file(path: str | os.PathLike, error: type[PrunesimError]) -> Any:
    """Parse a YAML file safely; any problem becomes `error(file, field, message)`."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > BUDGETS["yaml_bytes"].limit:
            raise error(p, None, f"{size:,} bytes: larger than the {int(BUDGETS['yaml_bytes'].limit):,}"
                        "-byte limit of a YAML input")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(p, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(p, None, f"cannot read: {e}") from None
    return load_yaml_text(text, p, error)
