"""The scheduler core: pure Python, no simulator, executor, I/O or clock (see DESIGN.md).

Importing it first decides whether its compiled build or its plain sources run
(:func:`marlaas.compiled.choose`), before any of its modules loads.
"""

from marlaas import compiled

compiled.choose()
