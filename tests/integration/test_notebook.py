"""examples/quickstart.ipynb runs top to bottom and every output reads at a glance.

Outputs are not stored (so the notebook cannot rot); the test executes it in a fresh kernel and
checks what a reader would see: an image for every figure cell, HTML for every result, no
stderr stream and no warning text anywhere. The executed copy is written next to the test's
temporary files (``quickstart.executed.ipynb``) for the docs' notebook page.
"""

import base64
import io
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"

pytestmark = pytest.mark.models

#: cells whose value is a figure: the last line of their source is one of these calls
FIGURE_CALL = re.compile(r"^(\w+\.plot\(.*\)|plot_\w+\(.*\))$")
WARNING_TEXT = re.compile(r"Warning\b|warnings\.warn|IProgress not found|Traceback", re.I)
#: what a reader does not see as text: inline scripts (circuitsvis' bundle) and the explorer's
#: page inside its frame's srcdoc
WIDGET = "application/vnd.jupyter.widget-view+json"
NOT_TEXT = re.compile(r"<script\b.*?</script>|srcdoc=\"[^\"]*\"", re.S | re.I)


def test_notebook_has_no_stored_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    pytest.importorskip("ipykernel")
    pytest.importorskip(
        "ipywidgets",
        reason="the notebook extra (ipywidgets) is not installed: huggingface_hub's own import "
        "of tqdm.auto warns 'IProgress not found' in a kernel without it",
    )
    folder = tmp_path_factory.mktemp("notebook")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}  # as a user runs it
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})  # fmt: skip
    client.execute(env=env)
    nbformat.write(nb, folder / "quickstart.executed.ipynb")
    # the executed copy the docs' notebook page renders (docs/scripts/gen_pages.py; build/ is
    # not in git)
    copy = ROOT / "build" / "notebooks" / "quickstart.ipynb"
    copy.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, copy.with_suffix(".part"))
    copy.with_suffix(".part").replace(copy)
    return nb


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _is_blank(png: bytes) -> bool:
    import matplotlib.image
    import numpy as np

    pixels = np.asarray(matplotlib.image.imread(io.BytesIO(png)))[..., :3]
    return float(pixels.std()) < 0.05


def test_quickstart_runs_without_errors_stderr_or_warnings(executed):
    outputs = [o for c in _code(executed) for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    for o in outputs:
        text = o.get("text", "") + "".join(NOT_TEXT.sub("", str(v))
                                           for k, v in o.get("data", {}).items()
                                           if k.startswith("text/"))  # fmt: skip
        assert not WARNING_TEXT.search(text), text[:500]


def test_every_figure_cell_shows_an_image(executed):
    figure_cells = [c for c in _code(executed)
                    if FIGURE_CALL.match(c.source.strip().splitlines()[-1])]  # fmt: skip
    assert len(figure_cells) >= 3  # training curves, the decomposition, the sweep heatmap
    for cell in figure_cells:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, cell.source  # one image: shown once, not twice
        png = base64.b64decode(images[0].data["image/png"])
        assert png.startswith(b"\x89PNG") and not _is_blank(png), cell.source


def test_every_result_cell_renders_as_html(executed):
    results = [o for c in _code(executed) for o in c.outputs if o.output_type == "execute_result"]
    tables = [o for o in results if "image/png" not in o.data]
    assert len(tables) >= 6 and all("text/html" in o.data for o in tables)
    html = "\n".join(o.data["text/html"] for o in tables)
    assert 'class="tl-table"' in html and 'class="tl-heat"' in html  # tables and heatmaps
    assert "table-layout:auto!important" in html  # JupyterLab's fixed layout overridden
    assert '<iframe class="tl-explorer"' in html  # the explorer, inline
    sweep = [h for h in (o.data["text/html"] for o in tables) if "<strong>SweepTable:" in h]
    assert sweep and 'data-group="analysis=decompose, score=cos_W"' in sweep[0]
    lists = next(o.data["text/html"] for o in tables if "bigram: red" in o.data["text/html"])
    assert "interchangeability: he" in lists and "context: pond" in lists  # the three lists
    assert "Decomposition of" in "\n".join(o.data["text/plain"] for o in tables)


def test_no_progress_widget_is_left_behind(executed):
    views = [c.source for c in _code(executed) for o in c.outputs
             if WIDGET in o.get("data", {})]  # fmt: skip
    assert not views, views


#: the calls that draw a progress bar, each in its own cell
QUIET_CELLS = [
    """\
from tl_leadterms import corpus_stats, decompose, make_windows, paper_model, sweep, train
from tl_leadterms.data import generate_stories, train_word_tokenizer

stories = generate_stories(60, seed=1)
tokenizer = train_word_tokenizer(stories, 120)
windows = make_windows(stories, n_ctx=12, tokenizer=tokenizer)[:64]
stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
model = paper_model(d_vocab=len(tokenizer), n_ctx=12, n_layers=2, tokenizer=tokenizer)""",
    "history = train(model, windows, lr=1.0, steps=6, track=stats)",
    "d = decompose(model, stats, schedule=history, per_head=True)",
    "table = sweep([('a', model), ('b', model)], stats, analyses=['decompose'])",
]


def test_a_finished_call_leaves_no_progress_widget(tmp_path):
    """Every bar drawn (TQDM_DELAY=0) by train, decompose and sweep is gone from the outputs
    when the call has ended: no widget view in the executed notebook, and in its place the
    empty output the bar's display was replaced by (so the bars were drawn at all)."""
    pytest.importorskip("ipykernel")
    pytest.importorskip("ipywidgets", reason="the notebook extra (ipywidgets) draws widgets")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in QUIET_CELLS])
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    env.update(TQDM_DELAY="0", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)  # fmt: skip
    for cell in nb.cells[1:]:
        kinds = [sorted(o.get("data", {})) for o in cell.outputs]
        assert not [k for k in kinds if WIDGET in k], (cell.source, cell.outputs)
        assert [o.data for o in cell.outputs if o.output_type == "display_data"] == [
            {"text/plain": ""}
        ] * len(cell.outputs), (cell.source, cell.outputs)
        assert cell.outputs, cell.source  # a bar was drawn, then removed


def test_the_executed_notebook_holds_its_images(executed):
    images = sum("image/png" in o.get("data", {}) for c in _code(executed) for o in c.outputs)
    print(f"executed quickstart: {images} images")
    assert images >= 3


def test_no_row_at_its_strongest_evidence_is_greyed(executed):
    """Issue 42: the quickstart's null is large enough for the rows it tests. A row that beats
    every permutation (p at its floor 1/(R + 1)) is never greyed: it stands out, or it is
    negligible (greyed for its size, not its evidence); no row is left unreachable."""
    cell = next(c for c in _code(executed) if "d = decompose(" in c.source)
    (result,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    text = result.data["text/plain"]
    floor = re.search(r"null=(\d+)", cell.source).group(1)
    floor = f"{1 / (int(floor) + 1):.3g}"
    words = ("stands out", "negligible", "not distinguished", "unreachable")
    tested = [line for line in text.splitlines() if any(w in line for w in words)]
    assert tested and all(f" {floor} " in line for line in tested)  # all at the floor here
    assert all("stands out" in line or "negligible" in line for line in tested)
    assert "unreachable" not in text and "no row can reach" not in text
    html = result.data["text/html"]
    greyed = html.split("<details", 1)[0].count('<tr class="tl-row tl-dim"')
    assert greyed == sum("negligible" in line for line in tested)
