"""Builds marlaas with the simulator's hot path compiled by mypyc (``marlaas/compiled.py``
lists the modules and says when their plain sources run instead).

Everything else is declared in pyproject.toml. The extensions are optional: where they do not
build (no C compiler), the same modules run as plain Python.
"""

import importlib.machinery
import os
import runpy
from pathlib import Path

from mypyc.build import mypycify
from setuptools import setup

HERE = Path(__file__).resolve().parent
MODULES = runpy.run_path(str(HERE / "marlaas" / "compiled.py"))["MODULES"]

# An extension an earlier build left beside a module no longer compiled would shadow its
# source (and fail to import against this build's runtime library). Only such a file goes:
# one named as a module of marlaas with its .py beside it.
for suffix in importlib.machinery.EXTENSION_SUFFIXES:
    for leftover in (HERE / "marlaas").rglob(f"*{suffix}"):
        source = leftover.with_name(leftover.name.removesuffix(suffix) + ".py")
        module = ".".join(source.relative_to(HERE).with_suffix("").parts)
        if source.exists() and module not in MODULES:
            leftover.unlink(missing_ok=True)

os.chdir(HERE)  # mypyc names modules by their paths from here
paths = [m.replace(".", "/") + ".py" for m in MODULES]
extensions = mypycify(paths, opt_level="3", group_name="marlaas")  # marlaas__mypyc: their runtime
for extension in extensions:
    extension.optional = True

setup(ext_modules=extensions)
