"""Interactive (Plotly) figures of report.html: zoom, pan and hover, no network needed.

Each module builds ``plotly.graph_objects.Figure`` objects from metrics of the event log;
:mod:`marlaas.report.interactive.embed` turns them into HTML with the Plotly bundle inlined once.
"""
