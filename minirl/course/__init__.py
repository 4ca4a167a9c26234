"""The course tooling: what the notebooks use beside the RL core. Import the module you need:

    minirl.course.widgets     experiment panels for the lessons (sliders, Run/Stop, live plot, run cache)
    minirl.course.sweeps      recorded sweeps the panels and exercise 7 start from; `python -m minirl.course.sweeps`
    minirl.course.selfcheck   the exercises' self-checks: which case failed, expected vs got
    minirl.course.build       solutions/*.ipynb (nbgrader markers and metadata) -> exercises/*.ipynb
    minirl.course.grade       run student notebooks with the solution's test cells put back, and score them
    minirl.course.execute     run lessons top to bottom and save them as committed (progress bars as a terminal shows)

    python -m minirl.course build [--solutions solutions] [--out exercises] [--check]
    python -m minirl.course grade PATH [--solutions solutions] [--timeout 120] [--out grades]
    python -m minirl.course execute NOTEBOOK... [--timeout 3600]

Nothing in the RL core imports this package; the lesson notebooks and the exercises do.
"""
