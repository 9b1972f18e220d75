"""Strict YAML reading: safe_load semantics, plus duplicate keys rejected with file and line."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from sim.errors import PrunesimError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (plain safe_load keeps the last silently)."""


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


def load_yaml_text(text: str, file: str | os.PathLike, error: type[PrunesimError]) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise error(file, where, f"malformed YAML: {getattr(e, 'problem', None) or e}") from None


def load_yaml_file(path: str | os.PathLike, error: type[PrunesimError]) -> Any:
    """Parse a YAML file safely; any problem becomes `error(file, field, message)`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(p, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(p, None, f"cannot read: {e}") from None
    return load_yaml_text(text, p, error)
