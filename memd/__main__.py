"""``python -m memd``: the same command line as the ``memd`` script, for a venv whose
scripts directory is not on PATH. It runs ``memd.cli`` as ``python -m memd.cli`` would,
so the package's entry point adds no import of the command line to the library."""

import runpy

runpy.run_module("memd.cli", run_name="__main__", alter_sys=True)
