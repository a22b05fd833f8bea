"""examples/quickstart.ipynb runs top to bottom (outputs are not stored, so it cannot rot)."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"

pytestmark = pytest.mark.models


def test_notebook_has_no_stored_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_quickstart_notebook_executes(tmp_path):
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    # the executed copy the docs' notebook page renders (docs/scripts/gen_pages.py; build/ is
    # not in git)
    executed = ROOT / "build" / "notebooks" / "quickstart.ipynb"
    executed.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, executed.with_suffix(".part"))
    executed.with_suffix(".part").replace(executed)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs
    )
    assert "red -> ['" in text and "Decomposition of" in text
    html = "\n".join(str(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "L0H0" in html  # the attention view rendered
    results = [o for o in outputs if o.output_type == "execute_result"]
    assert len(results) >= 8 and all("text/html" in o.data for o in results)
    assert 'class="tl-table"' in html and 'class="tl-heat"' in html  # tables and heatmaps
    assert '<iframe class="tl-explorer"' in html  # the explorer, inline
    sweep = [o.data["text/html"] for o in results if "<strong>SweepTable:" in o.data["text/html"]]
    assert sweep and 'data-group="analysis=decompose, score=cos_W"' in sweep[0]
