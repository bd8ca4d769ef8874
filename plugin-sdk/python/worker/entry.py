# The module componentize-py builds a plugin from: sends worker's host calls to the WIT imports,
# imports the plugin's app.py (which registers its handler with @worker.handler) and exposes the
# world's export class. The import runs at build time, so module-level work in app.py is done
# once and kept in the component's snapshot.
from worker import backend
from worker.component import Bindings, WitWorld  # noqa: F401 (the export componentize-py looks up)

backend.install(Bindings())

import app  # noqa: E402,F401 (registers the handler)
