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

import gc
import os
from pathlib import Path
from typing import Any

import yaml

from sim.errors import PrunesimError
from sim.limits import BUDGETS, read_input_text


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
    _nodes = 0

    def compose_node(self, parent, index):
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > BUDGETS["yaml_depth"].limit:
                raise _Refused(
                    f"nested deeper than {int(BUDGETS['yaml_depth'].limit)} levels",
                    self.peek_event().start_mark)
            if self._nodes > BUDGETS["yaml_nodes"].limit:
                raise _Refused(_too_many_nodes(), self.peek_event().start_mark)
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
    if getattr(loader, "may_alias", True):   # without aliases, the composer's count is the size
        _check_expanded_size(node)
    return loader.construct_document(node)


_FAST = getattr(yaml, "__with_libyaml__", False)


if _FAST:
    class _CStrictLoader(yaml.CSafeLoader):
        """_StrictLoader's checks on libyaml's parser and composer (the depth on the event stream,
        before composing: see _check_depth)."""

        def get_single_data(self):
            return _checked_single_data(self)


def _too_many_nodes() -> str:
    return f"more than {int(BUDGETS['yaml_nodes'].limit):,} nodes: refusing it"


def _check_lines(text: str) -> None:
    """Refuse a line longer than the line budget before parsing (the scanner's cost on one long
    flow line grows faster than its length; no input of prunesim needs one). One pass in windows
    of the budget's length: each window must hold a newline, and the next starts after its last."""
    limit = int(BUDGETS["yaml_line_chars"].limit)
    pos, n = 0, len(text)
    while n - pos > limit:
        nl = text.rfind("\n", pos, pos + limit + 1)
        if nl < 0:
            end = text.find("\n", pos)
            length = (n if end < 0 else end) - pos
            line = text.count("\n", 0, pos)
            raise _Refused(f"{length:,} characters on one line: longer than the {limit:,}-"
                           "character limit of a YAML line",
                           yaml.Mark("", pos, line, 0, None, None))
        pos = nl + 1


def _check_depth(text: str) -> None:
    """Refuse a document nested deeper than the depth budget, or with more nodes than the node
    budget before any alias is expanded, from libyaml's events (a loop, so a deep document costs
    no recursion, and a huge one stops at the budget); malformed YAML surfaces here as the
    parser's own error."""
    limit = BUDGETS["yaml_depth"].limit
    max_nodes = BUDGETS["yaml_nodes"].limit
    depth = 0       # open collections: a node event is at level depth + 1, as the composer counts
    nodes = 0
    for ev in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(ev, yaml.NodeEvent):     # scalars, aliases and collection starts
            nodes += 1
            if nodes > max_nodes:
                raise _Refused(_too_many_nodes(), ev.start_mark)
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


def _construct_int(loader, node: yaml.ScalarNode):
    """An integer of at most the digit budget (Python refuses to convert one of more than 4,300
    digits with a ValueError; this refuses earlier, naming the line)."""
    limit = BUDGETS["yaml_int_digits"].limit
    if len(node.value) > limit:
        raise _Refused(f"an integer of {len(node.value):,} characters: longer than the "
                       f"{int(limit):,}-digit limit of a YAML integer", node.start_mark)
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


_INT_TAG = "tag:yaml.org,2002:int"
_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor(_INT_TAG, _construct_int)
if _FAST:
    _CStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                   _construct_mapping)
    _CStrictLoader.add_constructor(_INT_TAG, _construct_int)


def _load(text: str, loader_class) -> Any:
    """yaml.load with one of the strict loaders, the cyclic garbage collector paused: a document
    is a tree of fresh objects (a recursive alias is refused), and the collector's passes over
    them would make the cost of a large document grow faster than its size."""
    loader = loader_class(text)
    loader.may_alias = "*" in text
    enabled = gc.isenabled()
    gc.disable()
    try:
        return loader.get_single_data()
    finally:
        if enabled:
            gc.enable()
        loader.dispose()


def load_yaml_text(text: str, file: str | os.PathLike, error: type[PrunesimError],
                   fast: bool | None = None) -> Any:
    """Parse YAML text strictly (module docstring); fast: libyaml's parser (default: where
    available), False: the pure-Python one (the reference the fast path is tested against)."""
    try:
        _check_lines(text)
        if _FAST if fast is None else fast and _FAST:
            try:
                _check_depth(text)
                return _load(text, _CStrictLoader)
            except _Refused:
                raise
            except yaml.YAMLError:
                pass    # malformed: the pure parser's message names more (the '\t', the alias)
        return _load(text, _StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        what = "" if isinstance(e, _Refused) else "malformed YAML: "
        raise error(file, where, f"{what}{getattr(e, 'problem', None) or e}") from None
    except (ValueError, OverflowError, RecursionError) as e:   # a constructor's own refusal
        raise error(file, None, f"malformed YAML: {e}") from None


def load_yaml_file(path: str | os.PathLike, error: type[PrunesimError]) -> Any:
    """Parse a YAML file safely; any problem becomes `error(file, field, message)`. Only a regular
    file of at most the YAML size budget is read (sim.limits.read_input_text): a device, a FIFO
    or a directory is one error line, before anything opens it."""
    p = Path(path)
    text = read_input_text(p, None, error=error, what="YAML file",
                           max_bytes=BUDGETS["yaml_bytes"].limit)
    return load_yaml_text(text, p, error)
