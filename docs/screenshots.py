"""The screenshots of the demo report (README and docs/ pages), taken with headless Chromium.

Each shot shows one part of the page: a copy of the report gets a style sheet that hides
everything else, then Chromium renders its top ``--height`` pixels.

    make demo && python docs/screenshots.py out/report.html   # writes docs/report_*.png
"""

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent

#: file name -> (CSS that leaves only that part of the page visible, window height)
SHOTS = {
    "report_decompose.png": ("body > :not(#findings):not(#decompose) { display: none; }", 1500),
    "report_attention.png": ("body > :not(#attention) { display: none; }", 1580),
    "report_tokens.png": (
        "body > :not(#associations) { display: none; }"
        ' #associations .association:not([data-word="fluffy"]) { display: none; }',
        680,
    ),
}


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    raise SystemExit("no Chromium found: apt-get install -y chromium")


def shoot(report: Path, css: str, height: int, out: Path) -> None:
    page = report.read_text(encoding="utf-8").replace("</head>", f"<style>{css}</style></head>", 1)
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "page.html"
        copy.write_text(page, encoding="utf-8")
        subprocess.run(
            [browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--proxy-server=127.0.0.1:9",  # a closed port: the page renders with no network
             "--virtual-time-budget=15000",  # the attention views' scripts finish first
             f"--screenshot={out}", f"--window-size=1280,{height}", copy.as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the demo's report.html")
    parser.add_argument("--out", type=Path, default=DOCS, help="folder for the PNG files")
    args = parser.parse_args()
    for name, (css, height) in SHOTS.items():
        shoot(args.report, css, height, args.out / name)


if __name__ == "__main__":
    main()
