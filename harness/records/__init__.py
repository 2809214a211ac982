"""Result records: the data contract between the runner, the CLI, pytest and reports.

Field names here are read by other tools (CI dashboards, the HTML renderer,
baseline diffs). Add fields; never rename or remove one.

The package imports nothing else of the harness (and no torch). `schema` holds the types, `files` the results
files, `journal` the journal a run appends to, `text` the shared formatting; every name is re-exported here.
"""

from harness.records.files import *  # noqa: F401,F403
from harness.records.schema import *  # noqa: F401,F403
from harness.records.text import *  # noqa: F401,F403
