"""The notebooks in a real JupyterLab, driven by headless Chromium: widgets render and respond.

nbval runs every notebook's code but never renders a widget, so a widget that breaks in the
browser (a missing frontend extension, an ipywidgets/JupyterLab version mismatch, a callback
that raises) passes nbval and fails the reader. This test starts JupyterLab on a free localhost
port with a random token, opens notebooks in Chromium (Debian's package, driven by Playwright;
nothing outside localhost is reachable), runs their cells and checks the page the way a reader
would see it.

Which notebooks: the ones whose code displays widgets (found by reading their code cells), and
at least those with a check that moving a control changes what the widget shows:
04_transformer (the attention explorer), 06_sampling (the next-token explorer), 08_roofline
(the roofline explorer and the thread-scaling runner) and 12_masked_diffusion (the denoising
viewer, and the diffusion canvas viewer: one step against sixteen on a multi-answer prompt).
A notebook without widgets has nothing more for a browser to find.

Which cells: each notebook runs in the page from its first cell to its last cell that makes a
widget, in order, as Run All would run them; the widget checks then move the controls. The
cells after the last widget (12's hundred-prompt experiment, 08's quantized decode and numexpr
timings) make no widget, and nbval runs every one of them in the same `make test`; running them
a second time here would cost minutes of CI and check nothing new.

Those cells must finish without an error output; every widget output must render as a widget
(not a text repr, not a widget error). Screenshots of the checked widgets go to
test-output/browser/ (not committed). The notebooks on disk are never modified: autosave is off,
and a request from the page to write a file is refused and fails the test.

Run: `make test-browser`, or `.venv/bin/pytest -q tests/browser`. It needs `chromium` on PATH
(Debian: `apt-get install chromium`) and the `playwright` package (the dev extra); without them
it skips, unless LLMNB_REQUIRE_BROWSER=1 (set by `make test-browser`), when it fails.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
HERE = Path(__file__).resolve().parent
OUT = ROOT / "test-output" / "browser"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
STDERR_MIME = "application/vnd.jupyter.stderr"
RUN_TIMEOUT_S = 600          # one notebook's run (nbval's cell timeout in `make test`)
SERVER_START_TIMEOUT_S = 90

# Chromium must stay on localhost: no background networking, updates, sync or lookups.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability",
    "--disable-client-side-phishing-detection", "--disable-breakpad", "--no-first-run",
    "--no-pings", "--metrics-recording-only", "--no-proxy-server",
    "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]

# JupyterLab settings for the run (a throwaway settings dir): never write the notebooks back,
# render every cell (no windowing, so all outputs are in the DOM), no news or update toasts.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True},
}


def _require(what: str) -> NoReturn:
    if os.environ.get("LLMNB_REQUIRE_BROWSER") == "1":
        pytest.fail(what)
    pytest.skip(what)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    _require("no chromium on PATH (Debian: apt-get install chromium)")


# Code that makes a widget: ipywidgets itself, or llmnb.widgets' explorers, runners and viewers.
WIDGET_CODE = re.compile(r"\bipywidgets\b|_explorer\(|_runner\(|_viewer\(")


def widget_notebooks() -> list[str]:
    """Notebooks (paths from the repository root) whose code cells use ipywidgets or
    llmnb.widgets' explorers, plus the checked ones."""
    names = set(CHECKS)
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        if WIDGET_CODE.search(code):
            names.add(path.relative_to(ROOT).as_posix())
    return sorted(names)


# ---------------------------------------------------------------------------------------------
# JupyterLab server and browser
# ---------------------------------------------------------------------------------------------

class Lab:
    def __init__(self, url: str, token: str, log: Path) -> None:
        self.url, self.token, self.log = url, token, log

    def api(self, method: str, path: str) -> Any:
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(lines[-n:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _end_with_this_process() -> None:
    """Run in the server's process before exec: Linux sends it SIGTERM if the test process
    dies (killed, not just failed), so no server outlives the test run. Its kernels exit
    by themselves when the server goes (ipykernel watches its parent)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)            # PR_SET_PDEATHSIG


def _stop(proc: subprocess.Popen[bytes], lab: Lab) -> None:
    """Ask the server to shut down (it stops its kernels), then end its process group."""
    if proc.poll() is None:
        try:
            lab.api("POST", "/api/shutdown")
            proc.wait(timeout=20)
        except (OSError, urllib.error.URLError, subprocess.TimeoutExpired):
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=10)
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        _require("jupyterlab is not installed (the notebooks extra)")
    tmp = Path(tempfile.mkdtemp(prefix="llmnb-lab-"))
    settings = tmp / "user-settings"
    for rel, value in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value), encoding="utf-8")
    port, token = _free_port(), secrets.token_hex(24)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={ROOT}",
           f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'ws'}",
           f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_PLATFORM_DIRS="1")
    log = tmp / "server.log"
    server = Lab(f"http://127.0.0.1:{port}", token, log)
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_end_with_this_process)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"jupyter lab exited ({proc.returncode}):\n"
                                     f"{server.log_tail()}")
            try:
                server.api("GET", "/api/status")
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"jupyter lab did not answer within "
                                         f"{SERVER_START_TIMEOUT_S} s:\n{server.log_tail()}"
                                         ) from None
                time.sleep(0.3)
        yield server
    finally:
        _stop(proc, server)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require("the playwright package is not installed (the dev extra)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# ---------------------------------------------------------------------------------------------
# One notebook in the page: open, run all, collect what went wrong
# ---------------------------------------------------------------------------------------------

_FIND_PANEL_JS = """(name) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return false;
  const panel = [...app.shell.widgets('main')].find(w => w.context && w.context.path === name);
  if (!panel || !panel.sessionContext.session || !panel.sessionContext.session.kernel) return false;
  window.__llmnbPanel = panel;
  return true;
}"""

_OPEN_JS = """async () => {
  const panel = window.__llmnbPanel;
  await panel.context.ready;
  await panel.sessionContext.ready;
  window.jupyterapp.shell.activateById(panel.id);
  const kernel = panel.sessionContext.session.kernel;
  window.__llmnbIopub = [];
  kernel.iopubMessage.connect((_, msg) => {
    const t = msg.header.msg_type;
    if (t === 'error') window.__llmnbIopub.push(msg.content.ename + ': ' + msg.content.evalue
                                                  + '\\n' + msg.content.traceback.join('\\n'));
    if (t === 'stream' && msg.content.name === 'stderr') window.__llmnbIopub.push(msg.content.text);
  });
  return kernel.name;
}"""

# Run > Run All Above on the cell after `last` (the only document in a fresh workspace): every
# cell from the first to `last`, in order, as the reader's Run All would run them.
_RUN_TO_JS = """async ([last, timeoutMs]) => {
  const app = window.jupyterapp;
  const panel = window.__llmnbPanel;
  if (app.shell.currentWidget !== panel)
    throw new Error('the notebook is not current');
  const timeout = new Promise((_, reject) => setTimeout(
      () => reject(new Error('the run did not finish in ' + timeoutMs / 1000 + ' s')), timeoutMs));
  const cells = panel.content.model.cells.length;
  const run = last + 1 < cells
      ? (panel.content.activeCellIndex = last + 1, app.commands.execute('notebook:run-all-above'))
      : app.commands.execute('notebook:run-all-cells');
  return await Promise.race([run, timeout]);
}"""

# Per code cell: execution count, output types, and the error outputs' text.
_CELLS_JS = """() => {
  const panel = window.__llmnbPanel;
  const cells = panel.content.model.cells;
  const out = [];
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    const outputs = c.outputs.toJSON();
    out.push({index: i, count: c.executionCount,
              types: outputs.map(o => o.output_type),
              widgets: outputs.filter(o => o.data && o.data['%s']).length,
              errors: outputs.filter(o => o.output_type === 'error')
                             .map(o => o.ename + ': ' + o.evalue)});
  }
  return {cells: out, kernel: panel.sessionContext.session.kernel.status,
          iopub: window.__llmnbIopub};
}""" % WIDGET_MIME

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ERROR_LINE = re.compile(r"Traceback \(most recent call last\)|^\w*(Error|Exception)\b.*:", re.M)
# The text repr JupyterLab shows for a widget it cannot render, e.g. "VBox(children=(IntSlider(".
WIDGET_REPR = re.compile(
    r"^(VBox|HBox|Box|GridBox|Tab|Accordion|Stack|(Int|Float|FloatLog|IntRange|FloatRange|Selection"
    r"|SelectionRange)Slider|Button|ToggleButtons?|Checkbox|Dropdown|Select|RadioButtons|HTML"
    r"|HTMLMath|Label|Image|Output|Play|(Int|Float)Progress)\((children|value|options|description"
    r"|layout|outputs)=", re.M)


def open_page(browser: Any, lab: Lab, writes: list[str]) -> tuple[Any, Any, list[str]]:
    """A fresh browser context whose requests may only go to the lab server; any request
    that would write a file (a save) is refused and listed in `writes`. Checkpoints, which
    JupyterLab makes on opening a notebook, go to the server's throwaway checkpoint dir."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})

    def only_lab(route: Any) -> None:
        req = route.request
        if not req.url.startswith(lab.url):
            route.abort()
        elif "/api/contents/" in req.url and req.method in ("PUT", "PATCH", "POST", "DELETE") \
                and not (req.method == "POST" and req.url.split("?")[0].endswith("/checkpoints")):
            writes.append(f"{req.method} {req.url.split('?')[0]}")
            route.abort()
        else:
            route.continue_()

    context.route("**/*", only_lab)
    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    return context, page, page_errors


def last_widget_cell(name: str) -> int:
    """The index (among all cells) of `name`'s last cell whose code makes a widget."""
    cells = json.loads((ROOT / name).read_text(encoding="utf-8"))["cells"]
    found = [i for i, c in enumerate(cells)
             if c["cell_type"] == "code" and WIDGET_CODE.search("".join(c["source"]))]
    assert found, f"{name}: no cell makes a widget"
    return found[-1]


def run_notebook(page: Any, lab: Lab, name: str, page_errors: list[str]) -> None:
    """Open `name`, run its cells from the first to its last widget cell, wait for the kernel,
    and fail on any error, any of those cells not run, or any unrendered widget."""
    last = last_widget_cell(name)
    # A workspace of its own, reset: JupyterLab would otherwise reopen earlier pages' documents.
    page.goto(f"{lab.url}/lab/workspaces/{Path(name).stem}/tree/{name}?reset&token={lab.token}")
    page.wait_for_function(_FIND_PANEL_JS, arg=name, timeout=90_000)
    assert page.evaluate(_OPEN_JS) == "python3"
    ok = page.evaluate(_RUN_TO_JS, [last, RUN_TIMEOUT_S * 1000])
    state = assert_no_errors(page, name, page_errors)
    assert ok is True, f"{name}: the run reported failure"
    unrun = [c["index"] for c in state["cells"] if c["count"] is None and c["index"] <= last]
    assert not unrun, f"{name}: cells {unrun} did not run"
    _check_widgets_render(page, name, sum(c["widgets"] for c in state["cells"]))


def assert_no_errors(page: Any, name: str, page_errors: list[str]) -> Any:
    """Once the kernel is idle: no error output in any cell, no traceback on the kernel's
    stderr (where exceptions in widget callbacks go), none in the page, no uncaught page error."""
    page.wait_for_function(
        "() => window.__llmnbPanel.sessionContext.session.kernel.status === 'idle'",
        timeout=60_000)
    state = page.evaluate(_CELLS_JS)
    problems = [f"cell {c['index']}: {e}" for c in state["cells"] for e in c["errors"]]
    problems += [f"the kernel's stderr: {ANSI.sub('', t)[:3000]}" for t in state["iopub"]
                 if ERROR_LINE.search(ANSI.sub("", t))]
    problems += [f"an uncaught error in the page: {e}" for e in page_errors]
    for loc in page.locator(f'.jp-OutputArea-output[data-mime-type="{STDERR_MIME}"],'
                            ' .jp-OutputArea-output[data-mime-type*="error"]').all():
        text = loc.inner_text()
        if ERROR_LINE.search(text):
            problems.append(f"an error output in the page: {text[:3000]}")
    assert not problems, f"{name}:\n" + "\n\n".join(problems)
    return state


def _check_widgets_render(page: Any, name: str, expected: int) -> None:
    """Every widget output in the notebook model is a rendered widget view in the page.

    A rendered widget output holds a `.jupyter-widgets` view; without the frontend extension
    JupyterLab falls back to the text/plain repr ("VBox(children=(IntSlider(...") instead.
    """
    selector = ".jp-OutputArea-output:has(> .jupyter-widgets)"
    try:
        page.wait_for_function(
            "([sel, n]) => [...document.querySelectorAll(sel)]"
            ".filter(e => e.getBoundingClientRect().height > 0).length >= n",
            arg=[selector, expected], timeout=30_000)
    except Exception:
        pass                                  # the assertions below say what is missing
    plain = page.locator('.jp-OutputArea-output[data-mime-type="text/plain"]')
    for text in plain.all_inner_texts():
        assert not WIDGET_REPR.search(text), f"{name}: a widget shown as text: {text[:300]}"
    errors = page.locator(".widget-error, "
                          ".jp-OutputArea-output:has-text('Error displaying widget')")
    assert errors.count() == 0, f"{name}: widget errors: {errors.all_inner_texts()}"
    shown = page.locator(selector).count()
    assert shown == expected, (f"{name}: {shown} rendered widget outputs, the notebook has "
                               f"{expected}")


def _slider(container: Any, description: str) -> Any:
    slider = container.locator(".widget-slider").filter(
        has=container.page.locator(".widget-label",
                                   has_text=re.compile(rf"^{re.escape(description)}$")))
    assert slider.count() == 1, f"expected one slider '{description}', found {slider.count()}"
    return slider


def _step_right(slider: Any) -> str:
    """Press → on the slider's handle, as a reader would; return the new readout."""
    before = slider.locator(".widget-readout").inner_text()
    handle = slider.locator(".noUi-handle")
    handle.focus()
    handle.press("ArrowRight")
    readout = slider.locator(".widget-readout")
    deadline = time.monotonic() + 10
    while readout.inner_text() == before:
        assert time.monotonic() < deadline, f"the slider did not move from {before}"
        time.sleep(0.05)
    return str(readout.inner_text())


def _wait_change(page: Any, read: Callable[[], Any], before: Any, what: str,
                 timeout_s: float = 30) -> Any:
    """Poll `read()` until it differs from `before`; a traceback from the kernel (a widget
    callback that raised) fails at once with that traceback."""
    deadline = time.monotonic() + timeout_s
    while (now := read()) == before:
        raised = [ANSI.sub("", t) for t in page.evaluate("() => window.__llmnbIopub")]
        raised = [t for t in raised if ERROR_LINE.search(t)]
        assert not raised, f"{what} did not change; the kernel raised:\n" + "\n".join(raised)
        assert time.monotonic() < deadline, f"{what} did not change within {timeout_s} s"
        time.sleep(0.1)
    return now


def _shot(loc: Any, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    loc.scroll_into_view_if_needed()
    loc.screenshot(path=str(path))
    return path


# ---------------------------------------------------------------------------------------------
# Per-notebook checks
# ---------------------------------------------------------------------------------------------

def check_denoising_viewer(page: Any) -> None:
    """Notebook 12: one step forward on the viewer's slider commits tokens on the canvas."""
    box = page.locator(".widget-vbox:not(.llmnb-canvas-viewer)").filter(
        has=page.locator(".widget-label", has_text=re.compile(r"^step$"))).first
    slider = _slider(box, "step")
    view = box.locator(".widget-html-content")
    assert slider.locator(".widget-readout").inner_text() == "1"
    before = view.inner_text()
    assert "▒" in before, f"the first step should still show masks: {before!r}"
    _shot(box, "12_denoising_viewer_step1.png")
    assert _step_right(slider) == "2"
    after = _wait_change(page, view.inner_text, before, "the denoising view")
    assert after.count("▒") < before.count("▒"), (before, after)
    _shot(box, "12_denoising_viewer_step2.png")


def _plot_images(container: Any) -> list[str]:
    return [img.get_attribute("src") or "" for img in container.locator("img").all()]


def check_roofline(page: Any) -> None:
    """Notebook 08: explorer and scaling runner render; moving B redraws the roofline plot."""
    explorer = page.locator(".llmnb-roofline-explorer")
    runner = page.locator(".llmnb-scaling-runner")
    assert explorer.count() >= 1, "no roofline explorer (.llmnb-roofline-explorer) in the page"
    assert runner.count() >= 1, "no thread-scaling runner (.llmnb-scaling-runner) in the page"
    explorer, runner = explorer.first, runner.first
    for w in (explorer, runner):
        assert w.locator(".jupyter-widgets").count() > 0 or "jupyter-widgets" in (
            w.get_attribute("class") or "")
        assert w.bounding_box() and w.bounding_box()["height"] > 20
    page.wait_for_function(
        "() => [...document.querySelectorAll('.llmnb-roofline-explorer img')]"
        ".some(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    plot = explorer.locator("img").first
    images, pixels = _plot_images(explorer), plot.screenshot()
    _shot(explorer, "08_roofline_explorer_before.png")
    assert _step_right(_slider(explorer, "B")) != ""
    _wait_change(page, lambda: _plot_images(explorer), images, "the roofline explorer's plot")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.llmnb-roofline-explorer img')]"
        ".every(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    assert plot.screenshot() != pixels, "the plot's image changed but its pixels did not"
    _shot(explorer, "08_roofline_explorer_after.png")
    _shot(runner, "08_scaling_runner.png")


def _explorer(page: Any, css: str) -> Any:
    """The one widget with CSS class `css`, rendered, its plot loaded."""
    found = page.locator(f".{css}")
    assert found.count() == 1, f"expected one .{css} in the page, found {found.count()}"
    box = found.first
    assert box.bounding_box() and box.bounding_box()["height"] > 20
    page.wait_for_function(
        f"() => [...document.querySelectorAll('.{css} img')]"
        ".some(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    return box


def _moves_plot(page: Any, box: Any, css: str, slider: str) -> str:
    """Step `slider` one notch right; the plot's image must change, in its pixels too."""
    plot = box.locator("img").first
    images, pixels = _plot_images(box), plot.screenshot()
    readout = _step_right(_slider(box, slider))
    _wait_change(page, lambda: _plot_images(box), images, f"the plot of .{css} after {slider}")
    page.wait_for_function(
        f"() => [...document.querySelectorAll('.{css} img')]"
        ".every(i => i.complete && i.naturalWidth > 0)", timeout=30_000)
    assert plot.screenshot() != pixels, f"{slider}: the plot's image changed but its pixels did not"
    return readout


def check_attention_explorer(page: Any) -> None:
    """Notebook 04: moving the layer, then the head, redraws the attention map."""
    css = "llmnb-attention-explorer"
    box = _explorer(page, css)
    _shot(box, "04_attention_explorer_before.png")
    assert _moves_plot(page, box, css, "layer") == "17"
    status = box.locator(".widget-html-content").last.inner_text()
    assert _moves_plot(page, box, css, "head") == "1"
    assert "tokens; the last query attends most to" in status, status
    _shot(box, "04_attention_explorer_after.png")


def check_next_token_explorer(page: Any) -> None:
    """Notebook 06: moving temperature, then top-k, redraws the distribution."""
    css = "llmnb-next-token-explorer"
    box = _explorer(page, css)
    _shot(box, "06_next_token_explorer_before.png")
    assert _moves_plot(page, box, css, "temperature") == "0.85"
    assert _moves_plot(page, box, css, "top-k") == "41"
    assert "tokens can be drawn" in box.locator(".widget-html-content").last.inner_text()
    _shot(box, "06_next_token_explorer_after.png")


def check_canvas_viewer(page: Any) -> None:
    """Notebook 12's canvas viewer: each step to the right commits positions in the many-step
    run, and the one-step run stays complete."""
    box = page.locator(".llmnb-canvas-viewer")
    assert box.count() == 1, f"expected one .llmnb-canvas-viewer, found {box.count()}"
    box = box.first
    slider = _slider(box, "step")
    views = box.locator(".llmnb-canvas")
    assert views.count() == 2, f"expected two runs side by side, found {views.count()}"
    one, many = views.nth(0), views.nth(1)
    assert one.inner_text().count("▒") == 0, "the one-step run should be fully committed"
    before = first = many.inner_text()
    assert "▒" in first, f"the first of many steps should still show masks: {first!r}"
    _shot(box, "canvas_viewer_step1.png")
    for step in range(2, 5):
        assert _step_right(slider) == str(step)
        after = _wait_change(page, many.inner_text, before, "the many-step canvas")
        assert f"step {step} of" in after, (before, after)
        assert after.count("▒") < before.count("▒"), (before, after)
        before = after
    assert one.inner_text().count("▒") == 0, "the one-step run changed"
    _shot(box, "canvas_viewer_step4.png")


def check_diffusion_viewers(page: Any) -> None:
    """Notebook 12: its denoising viewer, then its canvas viewer."""
    check_denoising_viewer(page)
    check_canvas_viewer(page)


CHECKS: dict[str, Callable[[Any], None]] = {
    "notebooks/04_transformer.ipynb": check_attention_explorer,
    "notebooks/06_sampling.ipynb": check_next_token_explorer,
    "notebooks/08_roofline.ipynb": check_roofline,
    "notebooks/12_masked_diffusion.ipynb": check_diffusion_viewers,
}


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", widget_notebooks())
def test_notebook_runs_clean_and_its_widgets_render_and_respond(
        name: str, browser: Any, lab: Lab) -> None:
    path = ROOT / name
    assert path.exists(), f"{path} is missing"
    writes: list[str] = []
    context, page, page_errors = open_page(browser, lab, writes)
    try:
        run_notebook(page, lab, name, page_errors)
        check = CHECKS.get(name)
        if check is not None:
            check(page)
            assert_no_errors(page, name, page_errors)
        else:
            widgets = page.locator(".jp-OutputArea-output > .jupyter-widgets")
            for i, w in enumerate(widgets.all()):
                _shot(w, f"{path.stem}_widget{i}.png")
    except BaseException:
        with contextlib.suppress(Exception):          # the failure, as the page showed it
            OUT.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(OUT / f"FAILED_{path.stem}.png"), full_page=True)
            stderr = page.evaluate("() => window.__llmnbIopub || []")
            print(f"{name}: the kernel's stderr:\n" + "".join(ANSI.sub("", t) for t in stderr))
        raise
    finally:
        context.close()
        with contextlib.suppress(OSError):            # stop this notebook's kernel
            for session in lab.api("GET", "/api/sessions"):
                lab.api("DELETE", f"/api/sessions/{session['id']}")
    assert not writes, f"the page tried to write the notebooks: {writes}"
