"""A real JupyterLab in headless Chromium, driven by Selenium: the kit as a student sees it.

A server on 127.0.0.1 (a free port, a fresh token, a temporary root, fresh settings) whose kernels
import this checkout (``PYTHONPATH``), and a Chromium that opens notebooks there, runs cells through
JupyterLab's own commands (what Run > Run Selected Cell does), reads what the output areas show and
presses keys on widgets.  Used by ``tests/test_live_explorer.py`` and ``benchmarks/bench_explorer.py``;
the browser itself comes from ``headless_chromium.chromium_driver``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from runtime_helpers import free_port

from pipeline_kit.interrupts import end_process

ROOT = Path(__file__).resolve().parent.parent
# Fresh user settings: no "fetch news?" toast over the notebook, no update check (there is no network),
# and every cell kept in the page (no windowing), so what a cell shows can be read wherever it is.
SETTINGS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
            "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"}}
# Server extensions the checks never touch, off: nbgrader's four and the language server take seconds to load.
SERVER_CONFIG = {"ServerApp": {"jpserver_extensions": {
    "jupyter_lsp": False, "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.assignment_list": False, "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.validate_assignment": False}}}


def write_notebook(path: Path, *sources: str) -> None:
    """A notebook of code cells for the default Python kernel (without a kernelspec Lab would ask for one)."""
    import nbformat
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(metadata=meta, cells=[nbformat.v4.new_code_cell(c) for c in sources]),
                   path)


@contextmanager
def jupyterlab(root: Path, timeout: float = 90.0, **environ: str):
    """Run ``jupyter lab`` serving ``root`` (its kernels with ``environ`` too); yield ``(base_url, token)``."""
    port, token = free_port(), secrets.token_hex(16)
    state = Path(tempfile.mkdtemp(prefix="pk-jlab-"))
    for rel, value in SETTINGS.items():
        (state / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (state / "settings" / rel).write_text(json.dumps(value))
    (state / "config").mkdir()
    (state / "config" / "jupyter_server_config.json").write_text(json.dumps(SERVER_CONFIG))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               JUPYTERLAB_SETTINGS_DIR=str(state / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(state / "runtime"), JUPYTER_CONFIG_DIR=str(state / "config"), **environ)
    env.pop("MPLBACKEND", None)  # the kernel picks its own backend, as a student's would
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
           "--JupyterNotebookApp.expose_app_in_browser=True"]  # (the classic notebook's pages, /notebooks/...)
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    log = open(state / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(state / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not answer in {timeout:.0f} s")
            time.sleep(0.3)
        yield base, token
    finally:
        end_process(proc)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


# JavaScript run in the page; `window.jupyterapp` is there because of --LabApp.expose_app_in_browser.
_OPEN = """
const [path, done] = arguments;
const wait = ms => new Promise(r => setTimeout(r, ms));
(async () => {
  while (!window.jupyterapp || !window.jupyterapp.shell) await wait(100);
  const app = window.jupyterapp;
  await app.started; await app.restored;
  const panel = await app.commands.execute('docmanager:open', {path});
  await panel.context.ready; await panel.sessionContext.ready;
  const until = performance.now() + 90000;  // a kernel that never gets idle: say so, do not hang
  while (panel.sessionContext.session?.kernel?.status !== 'idle') {
    if (performance.now() > until) throw new Error('kernel not idle: ' + panel.sessionContext.kernelDisplayStatus);
    await wait(100);
  }
  return panel.content.widgets.length;
})().then(done, e => done('ERROR ' + e));
"""
_RUN = """
const [indices, done] = arguments;
(async () => {
  const app = window.jupyterapp, nb = app.shell.currentWidget.content;
  for (const i of indices) {
    nb.activeCellIndex = i;
    await app.commands.execute('notebook:run-cell');
  }
  return true;
})().then(done, e => done('ERROR ' + e));
"""
# Press an arrow key on a slider's handle; report the ms until the widget image shows a new picture.
_PRESS = """
const [handle, img, key, done] = arguments;
const t0 = performance.now();
const seen = new MutationObserver(async () => {
  seen.disconnect();
  await img.decode();
  requestAnimationFrame(() => done(performance.now() - t0));
});
seen.observe(img, {attributes: true, attributeFilter: ['src']});
handle.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true, cancelable: true}));
"""


class Lab:
    """One browser tab on one JupyterLab server."""

    def __init__(self, driver, base: str, token: str):
        self.driver, self.base, self.token = driver, base, token
        driver.set_window_size(1400, 1000)  # the explorer's two rows of controls side by side
        driver.set_script_timeout(120)
        driver.get(f"{base}/lab?token={token}")

    def open(self, path: str) -> int:
        """Open a notebook and wait for its kernel; return its number of cells."""
        n = self.driver.execute_async_script(_OPEN, path)
        if isinstance(n, str):
            raise RuntimeError(f"opening {path}: {n}")
        return n

    def run(self, indices: list[int]) -> None:
        """Run these cells one after the other, each as Run > Run Selected Cell does."""
        res = self.driver.execute_async_script(_RUN, list(indices))
        if res is not True:
            raise RuntimeError(f"running cells {indices}: {res}")

    def outputs(self, index: int):
        """The rendered output elements of cell ``index`` of the current notebook."""
        cells = self.driver.find_elements("css selector", ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell")
        return cells[index].find_elements("css selector", ".jp-OutputArea-output")

    def wait(self, predicate, timeout: float = 60.0, what: str = "the page", cell: int | None = None):
        """Poll ``predicate`` until it is truthy; on timeout say what ``cell`` shows instead."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                shows = "" if cell is None else f"; cell {cell} shows: " + " | ".join(
                    (o.get_property("textContent") or "")[:300] for o in self.outputs(cell))
                raise TimeoutError(f"waited {timeout:.0f} s for {what}{shows}")
            time.sleep(0.1)

    def widget_image(self, cell: int, min_width: int = 600):
        """The ``ipywidgets.Image`` in cell ``cell`` once it holds a picture at least ``min_width`` wide."""
        def ready():
            return [e for e in self.driver.find_elements("css selector", ".jp-OutputArea-output img.widget-image")
                    if e.get_property("complete") and e.get_property("naturalWidth") >= min_width]
        return self.wait(ready, what="the widget's picture", cell=cell)[0]

    def slider_handle(self, label: str):
        """The draggable handle of the slider widget labelled ``label`` (it takes arrow keys)."""
        for slider in self.driver.find_elements("css selector", ".jp-OutputArea-output .widget-slider"):
            if slider.find_element("css selector", "label").get_property("textContent") == label:
                return slider.find_element("css selector", ".noUi-handle")
        raise LookupError(f"no slider labelled {label!r}")

    def press(self, handle, img, key: str) -> float:
        """Press ``key`` on a slider ``handle``; the ms until ``img`` shows its new picture."""
        return float(self.driver.execute_async_script(_PRESS, handle, img, key))
