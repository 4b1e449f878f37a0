"""Make docs/site/*.png from a built site: `tpucourse site --out /tmp/site`, then
`python docs/site/screenshots.py /tmp/site` (Playwright driving the system's Chromium)."""

import os
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
# (page, file, height of the clip in CSS pixels, what to do first)
SHOTS = [
    ("index", "home.png", 3700, None),
    ("ch06", "chapter-layer.png", 1500, None),
    ("ch15", "chapter-stage.png", 1500, "#can-you"),
    ("bench", "bench.png", 1300, None),
    ("ex01", "ex01-roofline.png", 1150, None),
    ("ex03", "ex03-streaming-attention.png", 900, "step=2"),
    ("ex05", "ex05-xray.png", 1000, "hover"),
    ("ex09", "ex09-blockspec.png", 1000, None),
    ("ex10", "ex10-timeline.png", 800, "deadlock"),
    ("ex11", "ex11-mesh.png", 1100, "step=1"),
]


def main(site: Path) -> None:
    executable = os.environ.get("TPUCOURSE_CHROMIUM") or shutil.which("chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900}, device_scale_factor=0.6)
        for name, file, height, action in SHOTS:
            page.goto((site / f"{name}.html").as_uri())
            top = 0
            if action == "#can-you":
                top = page.locator("#can-you").bounding_box()["y"] - 80
            elif action == "step=2":
                page.locator("#step").fill("2")
            elif action == "step=1":
                page.locator("#mesh-step").fill("1")
            elif action == "hover":
                page.frame_locator("#xray").locator("#jaxpr .op[data-name='tanh']").first.hover()
            elif action == "deadlock":
                page.locator("#tl-schedule").select_option("next-step-semaphore")
                while "DEADLOCK" not in page.locator("#tl-summary").inner_text():
                    page.locator("#tl-step").click()
            page.wait_for_timeout(200)
            full = page.evaluate("document.documentElement.scrollHeight")
            page.screenshot(path=str(HERE / file), full_page=True,
                            clip={"x": 0, "y": top, "width": 1200, "height": min(height, full - top)})
            print(f"{file}: {(HERE / file).stat().st_size // 1024} KiB")
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
