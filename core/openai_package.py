"""The `openai` package, imported without what Companion never uses.

- Its aiohttp transport: openai imports `openai._vendor.httpx_aiohttp` (its
  `DefaultAioHttpClient`) whenever aiohttp is installed, as it is here for the servers: a
  tenth of a second or more of a chat's first turn and of every doctor, for a transport
  Companion never uses (its clients speak httpx). Without that module openai defines a
  stand-in, which says so if it is ever asked for.
- The names of `openai.types` and `openai.types.responses` at once: each package's
  `__init__` imports every type it holds (hundreds of pydantic models: the Responses API,
  evals, graders, batches...), 0.2 s of a chat's first turn on this machine, of which the
  chat completions Companion calls use a few. Here each of the two is a package whose
  modules load as they are imported, as before, and whose `__init__` runs, in full, the
  first time a name it defines is asked for (`Deferred`): the same names, later.

Import `openai` from here: `from core.openai_package import openai`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

DEFERRED = ("openai.types", "openai.types.responses")


class Deferred(types.ModuleType):
    """A package whose `__init__` runs at the first name asked of it that is not one of its
    modules (already imported, or importable by that name). Companion asks them of one
    thread (its event loop's, where the client runs): a name asked from a second thread while
    the first runs the `__init__` could be missed."""

    def __init__(self, name: str, directory: Path) -> None:
        super().__init__(name)
        self.__path__ = [str(directory)]
        self.__file__ = str(directory / "__init__.py")
        self.__package__ = name
        self.__spec__ = importlib.util.spec_from_file_location(
            name, self.__file__, submodule_search_locations=self.__path__
        )
        self._companion_ran = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__all__":  # `from openai.types import *`
            raise AttributeError(name)
        if not self.__dict__["_companion_ran"]:
            self.__dict__["_companion_ran"] = True
            path = self.__dict__["__file__"]
            exec(compile(Path(path).read_bytes(), path, "exec"), self.__dict__)
            if name in self.__dict__:
                return self.__dict__[name]
        try:
            return importlib.import_module(f"{self.__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def _defer(package: str) -> None:
    """`package` (not imported yet) as a `Deferred` package, where it is installed."""
    if package in sys.modules:
        return
    found = importlib.util.find_spec("openai")
    if found is None or not found.submodule_search_locations:
        return  # not installed: `import openai` says so below
    directory = Path(next(iter(found.submodule_search_locations)), *package.split(".")[1:])
    if (directory / "__init__.py").is_file():
        sys.modules[package] = Deferred(package, directory)


sys.modules.setdefault("openai._vendor.httpx_aiohttp", None)  # type: ignore[arg-type]
if "openai" not in sys.modules:
    for _package in DEFERRED:
        _defer(_package)

import openai  # noqa: E402

__all__ = ["openai"]
