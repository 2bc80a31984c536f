"""Pictures of schedules, all drawn from one :class:`~schedverify.render.view.View` (the
check's Report plus the timeline), so that what a person looks at is what was checked.

- ``text``: the order grid and report (``schedverify check``) and the timed device x time
  timeline (``schedverify show``); no dependencies.
- ``image``: Gantt chart with memory over time (SVG/PNG/PDF); the only module that imports
  matplotlib, lazily (``pip install "schedverify[plot]"``).
- ``trace``: Chrome/Perfetto trace-event JSON.
"""
