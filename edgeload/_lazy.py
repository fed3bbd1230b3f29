"""Public names a package loads on first use (PEP 562), shared by the packages that do.

A package keeps a map of name -> the module that defines it; :func:`load_name` imports
that module when the name is first read and binds the value in the package, so later
reads are plain attribute reads.
"""

import importlib
from typing import Any, Dict, Mapping


def load_name(package: str, where: Mapping[str, str], namespace: Dict[str, Any], name: str) -> Any:
    """The value of ``package.name``, loaded from ``where[name]`` and bound in ``namespace``.

    Raises:
        AttributeError: ``name`` is not one of the package's names (as for any module).
    """
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, package), name)
    namespace[name] = value
    return value
