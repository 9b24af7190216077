"""The per-run HTML report: one static page that says what a pipeline run did.

:mod:`tasks.common.report.data` reads a run record and the artifacts it names into a
:class:`~tasks.common.report.data.RunReport` (stages, counts, exclusions, timings, cost, and each flow's
own sections: for cure the pool / judge / qrels / evaluate / release figures, for
evidencebench the instances, the ER@K of every system and the export's files);
:mod:`tasks.common.report.plots` draws its figures as inline SVG with matplotlib;
:mod:`tasks.common.report.html` renders the page (inline CSS, no script, no network) and writes it
to ``<root>/<flow>/reports/<run_id>.html``. It reads artifacts only, which never hold secrets.
"""
