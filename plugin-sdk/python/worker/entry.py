# The module componentize-py builds a plugin from: imports the plugin's app.py (which registers
# its handler with @worker.handler) and exposes the world's export class. The import runs at build
# time, so module-level work in app.py is done once and kept in the component's snapshot.
import app  # noqa: F401 (registers the handler)

from worker.component import WitWorld  # noqa: F401 (the export componentize-py looks up)
