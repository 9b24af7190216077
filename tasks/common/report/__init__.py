"""The per-run HTML report: one static page that says what a pipeline run did.

:mod:`tasks.common.report.records` reads a run record and the artifacts it names (stages,
counts, exclusions, timings, cost); :mod:`tasks.common.report.sections` is how a flow adds
its own sections, read from its stages' tables (each flow package lists them in
``tasks/<flow>/report``, and ``flows/registry.py`` hands them over); :mod:`tasks.common.report.data`
puts both in a :class:`~tasks.common.report.data.RunReport`; :mod:`tasks.common.report.plots`
draws figures as inline SVG with matplotlib; :mod:`tasks.common.report.html` renders the page
(inline CSS, no script, no network) and writes it to ``<root>/<flow>/reports/<run_id>.html``.
It reads artifacts only, which never hold secrets.
"""
