"""Builds marlaas with the simulator's hot path compiled by mypyc (``marlaas/compiled.py``
lists the modules and says when their plain sources run instead).

Everything else is declared in pyproject.toml. The extensions are optional: where they do not
build (no C compiler), the same modules run as plain Python.
"""

import runpy

from mypyc.build import mypycify
from setuptools import setup

MODULES = runpy.run_path("marlaas/compiled.py")["MODULES"]

paths = [m.replace(".", "/") + ".py" for m in MODULES]
extensions = mypycify(paths, opt_level="3", group_name="marlaas")  # marlaas__mypyc: their runtime
for extension in extensions:
    extension.optional = True

setup(ext_modules=extensions)
